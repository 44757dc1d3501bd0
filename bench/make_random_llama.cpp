// medtune-random-llama OUT_DIR --arch smollm2-135m|llama2-7b|llama3-8b [--dtype f32|bf16] [--seed S]
//                      [--layers N]
//
// Writes a Hugging Face directory (config.json + model.safetensors) with random weights in the
// architecture of a real model: the shapes ../shared/bench/hf_peft_anchor.py builds for the HF PEFT
// peer, so that medtune and transformers are timed on the same work (scripts/gpu-check.sh). No
// tokenizer: the benchmarks feed random token ids.
//
// Weights: uniform in ±1/sqrt(in) (PyTorch's default Linear init), embeddings ±0.5, norms 1, from
// a splitmix64 stream (deterministic on every machine). bf16 (the default) halves the file: a 7B
// model is 13.5 GB, written in about a minute. --layers N keeps the architecture's widths with N
// decoder layers: memory and time per layer measured where the whole model would not fit or run
// (the GPU backend under HIP-CPU).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"

namespace {

struct Arch {
  int64_t V, C, F, L, NH, NKV;
  double rope_theta;
  bool tied;
  int64_t max_pos;
};

// The shapes of hf_peft_anchor.py's ARCHS.
const std::map<std::string, Arch> kArchs = {
    {"smollm2-135m", {49152, 576, 1536, 30, 9, 3, 100000.0, true, 2048}},
    {"llama2-7b", {32000, 4096, 11008, 32, 32, 32, 10000.0, false, 4096}},
    {"llama3-8b", {128256, 4096, 14336, 32, 32, 8, 500000.0, false, 8192}},
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// n values uniform in [-scale, scale), as fp32 or bf16 bytes.
std::vector<uint8_t> uniform(int64_t n, float scale, bool bf16, uint64_t& state) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * (bf16 ? 2 : 4));
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float x = (2.0f * u - 1.0f) * scale;
    if (bf16) {
      const uint16_t b = medtune::f32_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &x, 4);
    }
  }
  return out;
}

std::vector<uint8_t> ones(int64_t n, bool bf16) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * (bf16 ? 2 : 4));
  const float one = 1.0f;
  const uint16_t one_bf16 = medtune::f32_to_bf16(one);
  for (int64_t i = 0; i < n; ++i) {
    if (bf16) std::memcpy(out.data() + 2 * i, &one_bf16, 2);
    else std::memcpy(out.data() + 4 * i, &one, 4);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, arch_name, dtype = "bf16";
  uint64_t state = 1;
  int64_t layers = 0;  // 0: the architecture's own
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arch" && i + 1 < argc) arch_name = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--seed" && i + 1 < argc) state = std::stoull(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) layers = std::stoll(argv[++i]);
    else if (out.empty() && a.rfind("--", 0) != 0) out = a;
    else {
      std::fprintf(stderr, "medtune-random-llama: unexpected argument '%s'\n", a.c_str());
      return 2;
    }
  }
  const auto it = kArchs.find(arch_name);
  if (out.empty() || it == kArchs.end() || (dtype != "f32" && dtype != "bf16") || layers < 0) {
    std::fprintf(stderr,
                 "usage: medtune-random-llama OUT_DIR --arch smollm2-135m|llama2-7b|llama3-8b "
                 "[--dtype f32|bf16] [--seed S] [--layers N]\n");
    return 2;
  }
  try {
    Arch a = it->second;
    if (layers > 0) a.L = layers;
    const bool bf16 = dtype == "bf16";
    const int64_t HD = a.C / a.NH;
    std::filesystem::create_directories(out);
    const nlohmann::ordered_json config{
        {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
        {"vocab_size", a.V}, {"hidden_size", a.C}, {"intermediate_size", a.F},
        {"num_hidden_layers", a.L}, {"num_attention_heads", a.NH}, {"num_key_value_heads", a.NKV},
        {"head_dim", HD}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5},
        {"rope_theta", a.rope_theta}, {"max_position_embeddings", a.max_pos},
        {"tie_word_embeddings", a.tied}, {"attention_bias", false}, {"mlp_bias", false},
        {"bos_token_id", 1}, {"eos_token_id", 2}, {"torch_dtype", bf16 ? "bfloat16" : "float32"}};
    medtune::io::atomic_write_file(out + "/config.json", config.dump(2) + "\n");

    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes{{"model.embed_tokens.weight", {a.V, a.C}},
                                                                     {"model.norm.weight", {a.C}}};
    if (!a.tied) shapes.push_back({"lm_head.weight", {a.V, a.C}});
    for (int64_t l = 0; l < a.L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      shapes.push_back({p + "input_layernorm.weight", {a.C}});
      shapes.push_back({p + "post_attention_layernorm.weight", {a.C}});
      shapes.push_back({p + "self_attn.q_proj.weight", {a.NH * HD, a.C}});
      shapes.push_back({p + "self_attn.k_proj.weight", {a.NKV * HD, a.C}});
      shapes.push_back({p + "self_attn.v_proj.weight", {a.NKV * HD, a.C}});
      shapes.push_back({p + "self_attn.o_proj.weight", {a.C, a.NH * HD}});
      shapes.push_back({p + "mlp.gate_proj.weight", {a.F, a.C}});
      shapes.push_back({p + "mlp.up_proj.weight", {a.F, a.C}});
      shapes.push_back({p + "mlp.down_proj.weight", {a.C, a.F}});
    }
    std::vector<std::vector<uint8_t>> data;
    data.reserve(shapes.size());
    std::vector<medtune::io::TensorToWrite> tensors;
    for (const auto& [name, shape] : shapes) {
      if (shape.size() == 1) {
        data.push_back(ones(shape[0], bf16));
      } else {
        const float scale = name.find("embed") != std::string::npos
                                ? 0.5f
                                : 1.0f / std::sqrt(static_cast<float>(shape[1]));
        data.push_back(uniform(shape[0] * shape[1], scale, bf16, state));
      }
      tensors.push_back({name, bf16 ? medtune::DType::BF16 : medtune::DType::F32, shape, data.back().data()});
    }
    medtune::io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "medtune-random-llama: %s\n", e.what());
    return 1;
  }
}
