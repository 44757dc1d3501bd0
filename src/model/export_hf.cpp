#include "model/export_hf.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"
#include "io/whole_file.h"
#include "model/merge.h"
#include "model/rope.h"

namespace medtune::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    default: throw Internal("export merge: unsupported output dtype");
  }
}

// config.json for a GGUF source: the fields transformers' LlamaConfig / Qwen2Config /
// MistralConfig read, from the metadata checkpoint_from_gguf parsed.
json config_from_model_config(const ModelConfig& c) {
  static const std::map<std::string, std::string> kClass = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}};
  json j;
  j["architectures"] = json::array({kClass.at(c.architecture)});
  j["model_type"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  RopeScaling rs = c.rope_scaling;
  if (!c.rope_freq_factors.empty()) {
    // A llama3 GGUF carries its scaling only as rope_freqs.weight; config.json needs parameters.
    const std::optional<RopeScaling> inferred = llama3_scaling_from_factors(c);
    if (!inferred) {
      throw BadInput("tensor 'rope_freqs.weight': these rope frequency factors are not Llama 3.x's "
                     "llama3 scaling, so transformers' config.json cannot express them");
    }
    rs = *inferred;
  }
  if (rs.type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rs.factor},
                         {"low_freq_factor", rs.low_freq_factor},
                         {"high_freq_factor", rs.high_freq_factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["hidden_act"] = "silu";
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j;
}

void copy_file_atomically(const std::string& from, const std::string& to) {
  io::atomic_write_file(to, io::read_whole_file(from));
}

}  // namespace

std::string merged_config_json(const io::Checkpoint& ckpt, const std::string& dtype_name) {
  json j;
  if (ckpt.format == "gguf") {
    j = config_from_model_config(ckpt.config);
    j["torch_dtype"] = dtype_name;
  } else {
    const std::string path = (fs::path(ckpt.path) / "config.json").string();
    j = io::read_json_file(path);
    // transformers 5 reads "dtype", older versions "torch_dtype"; set whichever the source uses.
    if (j.contains("dtype") || !j.contains("torch_dtype")) j["dtype"] = dtype_name;
    if (j.contains("torch_dtype")) j["torch_dtype"] = dtype_name;
  }
  return j.dump(2) + "\n";
}

HfExportReport export_merged_hf(const io::Checkpoint& ckpt, const LoraWeights* lora,
                                const std::string& out_dir, DType dtype) {
  const std::string dname = torch_dtype_name(dtype);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw BadInput(out_dir + ": cannot create directory: " + ec.message());
  HfExportReport rep;

  // Merge tensor by tensor, keeping only the rounded output (the fp64 copy is per tensor).
  const std::vector<std::string> names = merged_tensor_names(ckpt);
  std::vector<std::vector<uint8_t>> bytes(names.size());
  std::vector<io::TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    const MergedTensor m = merge_tensor(ckpt, lora, names[i]);
    require_representable(m, dtype);
    const size_t esize = dtype == DType::F32 ? 4 : 2;
    bytes[i].resize(m.values.size() * esize);
    for (size_t k = 0; k < m.values.size(); ++k) {
      if (dtype == DType::F32) {
        const float f = round_once_f32(m.values[k]);
        std::memcpy(bytes[i].data() + 4 * k, &f, 4);
      } else {
        const uint16_t h = dtype == DType::F16 ? round_once_f16(m.values[k]) : round_once_bf16(m.values[k]);
        std::memcpy(bytes[i].data() + 2 * k, &h, 2);
      }
    }
    tensors.push_back({names[i], dtype, m.shape, bytes[i].data()});
  }
  io::write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  rep.written.push_back("model.safetensors");
  io::atomic_write_file((fs::path(out_dir) / "config.json").string(), merged_config_json(ckpt, dname));
  rep.written.push_back("config.json");

  if (ckpt.format == "gguf") {
    rep.notes.push_back(
        "no tokenizer files: the source is a GGUF file, whose tokenizer lives in its metadata "
        "(tokenizer.ggml.*); copy tokenizer.json etc. from the original Hugging Face model");
    return rep;
  }
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model",
                        "chat_template.jinja", "added_tokens.json"}) {
    const fs::path src = fs::path(ckpt.path) / f;
    if (!fs::exists(src)) continue;
    copy_file_atomically(src.string(), (fs::path(out_dir) / f).string());
    rep.written.push_back(f);
  }
  if (!fs::exists(fs::path(ckpt.path) / "tokenizer.json") &&
      !fs::exists(fs::path(ckpt.path) / "tokenizer.model")) {
    rep.notes.push_back("no tokenizer files: " + ckpt.path + " has neither tokenizer.json nor tokenizer.model");
  }
  return rep;
}

}  // namespace medtune::model
