// medtune-tiny-llama OUT_DIR VOCAB_SIZE [SEED]: writes a tiny random Llama as a Hugging Face
// directory (config.json + model.safetensors, F32, tied embeddings; hidden 32, 2 layers, 4 query
// heads / 2 key-value heads of 8, MLP 64) for end-to-end tests that train for real in seconds.
// The caller copies a tokenizer.json whose vocabulary has VOCAB_SIZE ids next to it (the e2e
// tests use the committed SmolLM2 tokenizer fixture: 49152).
//
// Why not a committed fixture: with a real tokenizer's 49k-id vocabulary the embedding alone is
// 6 MiB; generating it takes milliseconds. The weights are a deterministic function of SEED (a
// splitmix64 stream mapped to floats by bit arithmetic, no <random> distributions, whose output
// differs between standard libraries), so every machine trains the same model.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/safetensors_writer.h"

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale): the top 24 bits as a fraction, exactly representable in fp32.
std::vector<float> uniform(int64_t n, float scale, uint64_t& state) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const auto u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    x = (2.0f * u - 1.0f) * scale;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: medtune-tiny-llama OUT_DIR VOCAB_SIZE [SEED]\n");
    return 2;
  }
  try {
    const std::string out = argv[1];
    const int64_t V = std::stoll(argv[2]);
    uint64_t state = argc == 4 ? std::stoull(argv[3]) : 1;
    const int64_t C = 32, F = 64, L = 2, NH = 4, NKV = 2, HD = 8;
    std::filesystem::create_directories(out);

    const nlohmann::ordered_json config{
        {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
        {"vocab_size", V}, {"hidden_size", C}, {"intermediate_size", F},
        {"num_hidden_layers", L}, {"num_attention_heads", NH}, {"num_key_value_heads", NKV},
        {"head_dim", HD}, {"hidden_act", "silu"}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0}, {"max_position_embeddings", 2048}, {"tie_word_embeddings", true},
        {"attention_bias", false}, {"mlp_bias", false}, {"bos_token_id", 1}, {"eos_token_id", 2},
        {"torch_dtype", "float32"}};
    medtune::io::atomic_write_file(out + "/config.json", config.dump(2) + "\n");

    // Names and shapes (out, in) as transformers' LlamaForCausalLM stores them.
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes{{"model.embed_tokens.weight", {V, C}},
                                                                     {"model.norm.weight", {C}}};
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      shapes.push_back({p + "input_layernorm.weight", {C}});
      shapes.push_back({p + "post_attention_layernorm.weight", {C}});
      shapes.push_back({p + "self_attn.q_proj.weight", {NH * HD, C}});
      shapes.push_back({p + "self_attn.k_proj.weight", {NKV * HD, C}});
      shapes.push_back({p + "self_attn.v_proj.weight", {NKV * HD, C}});
      shapes.push_back({p + "self_attn.o_proj.weight", {C, NH * HD}});
      shapes.push_back({p + "mlp.gate_proj.weight", {F, C}});
      shapes.push_back({p + "mlp.up_proj.weight", {F, C}});
      shapes.push_back({p + "mlp.down_proj.weight", {C, F}});
    }
    std::vector<std::vector<float>> data;
    std::vector<medtune::io::TensorToWrite> tensors;
    data.reserve(shapes.size());
    for (const auto& [name, shape] : shapes) {
      if (shape.size() == 1) {
        data.emplace_back(static_cast<size_t>(shape[0]), 1.0f);  // RMSNorm weights start at 1
      } else {
        // Embeddings ~0.5 so logits spread; projections 1/sqrt(in), like PyTorch's default init.
        const float scale = name.find("embed") != std::string::npos ? 0.5f : 1.0f / std::sqrt(static_cast<float>(shape[1]));
        data.push_back(uniform(shape[0] * shape[1], scale, state));
      }
      tensors.push_back({name, medtune::DType::F32, shape, data.back().data()});
    }
    medtune::io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "medtune-tiny-llama: %s\n", e.what());
    return 1;
  }
}
