// open_checkpoint: a Hugging Face directory or a GGUF file, validated against the shapes the
// architecture needs, so that a model never starts computing with a missing or misshapen weight.
#include "io/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/bnb_checkpoint.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace medtune::io {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// The config fields a tensor's expected shape derives from, for error messages.
std::string shape_origin(const std::string& name, const ModelConfig& c) {
  auto kv = [](const char* k, int64_t v) { return std::string(k) + "=" + std::to_string(v); };
  const std::string C = kv("hidden_size", c.hidden_size);
  const std::string HD = kv("head_dim", c.head_dim);
  if (name.find("embed_tokens") != std::string::npos || name == "lm_head.weight")
    return kv("vocab_size", c.vocab_size) + ", " + C;
  if (name.find("q_proj") != std::string::npos || name.find("o_proj") != std::string::npos)
    return kv("num_attention_heads", c.num_attention_heads) + ", " + HD + ", " + C;
  if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos)
    return kv("num_key_value_heads", c.num_key_value_heads) + ", " + HD + ", " + C;
  if (name.find("mlp.") != std::string::npos)
    return kv("intermediate_size", c.intermediate_size) + ", " + C;
  return C;
}

bool weight_dtype_ok(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || dtype_is_quantized(t);
}

// Checks every expected tensor; drops lm_head.weight when the embeddings are tied (transformers
// ties lm_head to embed_tokens and ignores a stored lm_head copy, so must we).
void validate(Checkpoint& ck, const std::string& config_origin) {
  const ModelConfig& c = ck.config;
  if (c.tie_word_embeddings) ck.tensors.erase("lm_head.weight");
  // Tensors are named as the file names them: a GGUF's own name first, the HF name after it.
  auto display = [&](const std::string& name) {
    const std::string g = ck.format == "gguf" ? gguf_tensor_name(name) : "";
    return g.empty() ? "'" + name + "'" : "'" + g + "' (" + name + ")";
  };
  for (const auto& [name, shape] : expected_tensor_shapes(c)) {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) {
      if (name == "lm_head.weight")
        throw BadInput(ck.path + ": missing tensor " + display(name) + " (and " + config_origin +
                       " does not set tie_word_embeddings)");
      throw BadInput(ck.path + ": missing tensor " + display(name));
    }
    const RawTensor& t = it->second;
    if (t.shape != shape)
      throw BadInput(ck.path + ": tensor " + display(name) + " has shape " + shape_str(t.shape) +
                     ", expected " + shape_str(shape) + " (from " + config_origin + ": " +
                     shape_origin(name, c) + ")");
    if (!weight_dtype_ok(t.dtype))
      throw BadInput(ck.path + ": tensor " + display(name) + " has dtype " +
                     std::string(dtype_name(t.dtype)) +
                     "; model weights must be F32, F16, BF16 or a GGUF quantized type");
  }
}

}  // namespace

std::map<std::string, std::vector<int64_t>> expected_tensor_shapes(const ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.num_attention_heads * c.head_dim;   // NH*HD
  const int64_t KV = c.num_key_value_heads * c.head_dim;  // NKV*HD
  std::map<std::string, std::vector<int64_t>> s;
  s["model.embed_tokens.weight"] = {V, C};
  s["model.norm.weight"] = {C};
  if (!c.tie_word_embeddings) s["lm_head.weight"] = {V, C};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s[p + "input_layernorm.weight"] = {C};
    s[p + "post_attention_layernorm.weight"] = {C};
    s[p + "self_attn.q_proj.weight"] = {Q, C};
    s[p + "self_attn.k_proj.weight"] = {KV, C};
    s[p + "self_attn.v_proj.weight"] = {KV, C};
    s[p + "self_attn.o_proj.weight"] = {C, Q};
    if (c.attention_bias) {
      s[p + "self_attn.q_proj.bias"] = {Q};
      s[p + "self_attn.k_proj.bias"] = {KV};
      s[p + "self_attn.v_proj.bias"] = {KV};
      // transformers' LlamaAttention puts the bias on o_proj too; Qwen2Attention does not.
      if (c.architecture == "llama") s[p + "self_attn.o_proj.bias"] = {C};
    }
    s[p + "mlp.gate_proj.weight"] = {F, C};
    s[p + "mlp.up_proj.weight"] = {F, C};
    s[p + "mlp.down_proj.weight"] = {C, F};
  }
  return s;
}

Checkpoint open_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw BadInput(path + ": no such file or directory");

  if (fs::is_directory(status)) {
    Checkpoint ck;
    ck.path = path;
    ck.format = "safetensors";
    const std::string config_path = (fs::path(path) / "config.json").string();
    if (!fs::is_regular_file(config_path))
      throw BadInput(path + ": not a model directory (no config.json)");
    ck.config = read_hf_config(config_path);
    // bitsandbytes 4-bit checkpoints (QLoRA's saved form) have their own reader; any other
    // quantization_config is refused there with a message naming it
    ck.tensors = quantization_method(config_path).empty() ? read_safetensors_dir(path)
                                                          : read_bnb_4bit_dir(path);
    validate(ck, "config.json");
    return ck;
  }
  if (ends_with(path, ".gguf") || starts_with_gguf_magic(path)) {
    Checkpoint ck = checkpoint_from_gguf(std::make_shared<GgufFile>(GgufFile::open(path)));
    ck.path = path;
    ck.format = "gguf";
    validate(ck, "GGUF metadata");
    return ck;
  }
  throw BadInput(path + ": not a model (expected a Hugging Face directory with config.json, or a "
                        ".gguf file)");
}

}  // namespace medtune::io
