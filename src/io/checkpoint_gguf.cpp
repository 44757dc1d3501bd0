// GGUF -> Checkpoint: llama.cpp metadata to ModelConfig, llama.cpp tensor names to HF names.
//
// The q/k row permutation (qk_rows_permuted)
// ------------------------------------------
// For llama and mistral, llama.cpp's convert_hf_to_gguf.py (LlamaModel.modify_tensors) rewrites
// q_proj.weight/bias with permute(W, n_head, n_head) and k_proj.weight/bias with
// permute(W, n_head, n_head_kv), where
//
//     permute(W, n_head, n_head_kv):                  # W: (n_head * head_dim, in) in HF order
//         if n_head_kv is not None and n_head != n_head_kv: n_head = n_head_kv
//         return W.reshape(n_head, 2, head_dim // 2, *W.shape[1:]).swapaxes(1, 2).reshape(W.shape)
//
// i.e. within each head h (NH heads for q, NKV for k), with HD = head_dim and i in [0, HD/2):
//
//     gguf_row[h*HD + 2*i + 0] = hf_row[h*HD + i]           (first rotate-half)
//     gguf_row[h*HD + 2*i + 1] = hf_row[h*HD + i + HD/2]    (second rotate-half)
//
// HF's rotate_half rope pairs dimension i with i + HD/2; llama.cpp's "normal" (GPT-J style) rope
// pairs 2i with 2i+1, so the converter interleaves the two halves. To undo it (GGUF -> HF):
//
//     hf_row[h*HD + j] = gguf_row[h*HD + 2*j]                for j <  HD/2
//     hf_row[h*HD + j] = gguf_row[h*HD + 2*(j - HD/2) + 1]   for j >= HD/2
//
// Equivalently the model may keep the GGUF order and apply an interleaved rope to q and k: the
// attention scores q.k are the same either way (both q and k are permuted the same way per head).
// The permutation acts on rows (the output dimension, PyTorch dim 0), so each quantized row stays
// intact. qwen2 GGUFs are converted without it (Qwen2Model does not permute): qk_rows_permuted is
// false for them.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "io/checkpoint.h"

namespace medtune::io {

namespace {

// llama.cpp's names of a block's tensors and their Hugging Face names under model.layers.N.
constexpr std::pair<const char*, const char*> kBlockNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// "123" -> true; "", "01", "1a" -> false.
bool is_layer_number(const std::string& s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// llama.cpp name -> HF name, or "" when it is not one we know (kept under its GGUF name).
std::string hf_name(const std::string& g) {
  for (const auto& [from, to] : kGlobalNames)
    if (g == from) return to;
  if (g.rfind("blk.", 0) != 0) return "";
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = g.substr(4, dot - 4);
  if (!is_layer_number(layer)) return "";
  const std::string rest = g.substr(dot + 1);
  for (const auto& [from, to] : kBlockNames)
    if (rest == from) return "model.layers." + layer + "." + to;
  return "";
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  for (const auto& [g, h] : kGlobalNames)
    if (hf == h) return g;
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  if (!is_layer_number(layer)) return "";
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [g, h] : kBlockNames)
    if (rest == h) return "blk." + layer + "." + g;
  return "";
}

namespace {

int64_t positive(const GgufFile& g, const std::string& key, int64_t v) {
  if (v <= 0) {
    throw BadInput(g.path() + ": metadata key '" + key + "': " + std::to_string(v) +
                   " (must be > 0)");
  }
  return v;
}

}  // namespace

Checkpoint checkpoint_from_gguf(std::shared_ptr<GgufFile> gguf) {
  if (!gguf) throw Internal("checkpoint_from_gguf: null GgufFile");
  const GgufFile& g = *gguf;
  const std::string& path = g.path();

  const std::string arch = g.get_string("general.architecture");
  if (arch != "llama" && arch != "mistral" && arch != "qwen2") {
    throw BadInput(path + ": unsupported architecture '" + arch +
                   "' (supported: llama, mistral, qwen2)");
  }
  const std::string a = arch + ".";

  ModelConfig c;
  c.architecture = arch;
  c.max_position_embeddings = positive(g, a + "context_length", g.get_int(a + "context_length"));
  c.hidden_size = positive(g, a + "embedding_length", g.get_int(a + "embedding_length"));
  c.num_hidden_layers = positive(g, a + "block_count", g.get_int(a + "block_count"));
  c.intermediate_size =
      positive(g, a + "feed_forward_length", g.get_int(a + "feed_forward_length"));
  c.num_attention_heads =
      positive(g, a + "attention.head_count", g.get_int(a + "attention.head_count"));
  c.num_key_value_heads =
      positive(g, a + "attention.head_count_kv",
               g.get_int_or(a + "attention.head_count_kv", c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw BadInput(path + ": metadata key '" + a + "attention.head_count_kv': " +
                   std::to_string(c.num_key_value_heads) + " does not divide the " +
                   std::to_string(c.num_attention_heads) + " attention heads");
  }
  if (!g.has(a + "attention.key_length") && c.hidden_size % c.num_attention_heads != 0) {
    throw BadInput(path + ": metadata key '" + a +
                   "embedding_length': " + std::to_string(c.hidden_size) +
                   " is not a multiple of the " + std::to_string(c.num_attention_heads) +
                   " heads and '" + a + "attention.key_length' is absent");
  }
  c.head_dim =
      positive(g, a + "attention.key_length",
               g.get_int_or(a + "attention.key_length", c.hidden_size / c.num_attention_heads));
  if (c.head_dim % 2 != 0) {
    throw BadInput(path + ": head dimension " + std::to_string(c.head_dim) +
                   " is odd (rope needs pairs)");
  }
  // The model ropes the whole head and uses one head size for k and v; say so if a file differs.
  const int64_t rope_dim = g.get_int_or(a + "rope.dimension_count", c.head_dim);
  if (rope_dim != c.head_dim) {
    throw BadInput(path + ": metadata key '" + a + "rope.dimension_count': " +
                   std::to_string(rope_dim) + " differs from the head dimension " +
                   std::to_string(c.head_dim) + " (partial rotary embeddings are not supported)");
  }
  const int64_t value_len = g.get_int_or(a + "attention.value_length", c.head_dim);
  if (value_len != c.head_dim) {
    throw BadInput(path + ": metadata key '" + a + "attention.value_length': " +
                   std::to_string(value_len) + " differs from the key length " +
                   std::to_string(c.head_dim) + " (not supported)");
  }
  c.rms_norm_eps = g.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!(c.rms_norm_eps > 0.0)) {
    throw BadInput(path + ": metadata key '" + a + "attention.layer_norm_rms_epsilon': " +
                   std::to_string(c.rms_norm_eps) + " (must be > 0)");
  }
  c.rope_theta = g.get_float_or(a + "rope.freq_base", 10000.0);
  if (!(c.rope_theta > 0.0)) {
    throw BadInput(path + ": metadata key '" + a +
                   "rope.freq_base': " + std::to_string(c.rope_theta) + " (must be > 0)");
  }
  c.sliding_window = g.get_int_or(a + "attention.sliding_window", 0);

  // Rope scaling. llama.cpp's converter writes llama3 scaling as a precomputed rope_freqs.weight
  // tensor (kept below under that name) rather than as metadata; when a file does spell it out,
  // read it. linear/yarn/longrope are not implemented by the model, so say so now.
  const std::string scaling = g.get_string_or(a + "rope.scaling.type", "none");
  if (scaling == "llama3") {
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = g.get_float_or(a + "rope.scaling.factor", c.rope_scaling.factor);
    c.rope_scaling.original_max_position_embeddings =
        g.get_int_or(a + "rope.scaling.original_context_length",
                     c.rope_scaling.original_max_position_embeddings);
    c.rope_scaling.low_freq_factor =
        g.get_float_or(a + "rope.scaling.low_freq_factor", c.rope_scaling.low_freq_factor);
    c.rope_scaling.high_freq_factor =
        g.get_float_or(a + "rope.scaling.high_freq_factor", c.rope_scaling.high_freq_factor);
  } else if (scaling != "none" && !scaling.empty()) {
    throw BadInput(path + ": metadata key '" + a + "rope.scaling.type': '" + scaling +
                   "' is not supported (supported: none, llama3)");
  }

  // Tokenizer facts the model config carries.
  if (g.has("tokenizer.ggml.tokens")) {
    c.vocab_size =
        positive(g, "tokenizer.ggml.tokens",
                 static_cast<int64_t>(g.get_string_array("tokenizer.ggml.tokens").size()));
  } else if (g.has(a + "vocab_size")) {
    c.vocab_size = positive(g, a + "vocab_size", g.get_int(a + "vocab_size"));
  } else {
    throw BadInput(path + ": neither 'tokenizer.ggml.tokens' nor '" + a +
                   "vocab_size' is present: cannot tell the vocabulary size");
  }
  c.bos_token_id = g.get_int_or("tokenizer.ggml.bos_token_id", -1);
  if (g.has("tokenizer.ggml.eos_token_id")) {
    c.eos_token_ids.push_back(g.get_int("tokenizer.ggml.eos_token_id"));
  }
  // Chat models mark end-of-turn separately (Llama 3's <|eot_id|>); generation stops at either.
  if (g.has("tokenizer.ggml.eot_token_id")) {
    const int64_t eot = g.get_int("tokenizer.ggml.eot_token_id");
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != eot) c.eos_token_ids.push_back(eot);
  }

  Checkpoint ck;
  ck.path = path;
  ck.format = "gguf";
  ck.gguf = gguf;
  for (const std::string& name : g.tensor_order()) {
    // Keyed by the HF name; RawTensor::name keeps the GGUF name, the one a user finds in the file.
    std::string key = hf_name(name);
    if (key.empty()) key = name;  // e.g. rope_freqs.weight (llama3): kept under its GGUF name
    if (!ck.tensors.emplace(key, g.tensors().at(name)).second) {
      throw BadInput(path + ": tensor '" + name + "': its name '" + key +
                     "' is given by two tensors");
    }
  }
  if (auto it = ck.tensors.find("rope_freqs.weight"); it != ck.tensors.end()) {
    // llama3 scaling as llama.cpp's converter stores it: one divisor per rotary pair.
    const RawTensor& t = it->second;
    if (t.dtype != DType::F32 || t.shape.size() != 1 || t.shape[0] != c.head_dim / 2) {
      throw BadInput(path + ": tensor 'rope_freqs.weight': expected F32 of shape (" +
                     std::to_string(c.head_dim / 2) + ") (head dimension / 2), found " +
                     std::string(dtype_name(t.dtype)) + " with " + std::to_string(t.shape.size()) + " dimension(s)");
    }
    c.rope_freq_factors.resize(static_cast<size_t>(t.shape[0]));
    std::memcpy(c.rope_freq_factors.data(), t.data, c.rope_freq_factors.size() * sizeof(float));
    for (const float f : c.rope_freq_factors) {
      if (!(f > 0.0f) || !std::isfinite(f)) {
        throw BadInput(path + ": tensor 'rope_freqs.weight' holds " + std::to_string(f) +
                       " (every rope frequency factor must be finite and > 0)");
      }
    }
  }
  c.tie_word_embeddings = ck.tensors.count("lm_head.weight") == 0;
  c.attention_bias = g.tensors().count("blk.0.attn_q.bias") != 0;
  ck.config = std::move(c);
  ck.qk_rows_permuted = arch == "llama" || arch == "mistral";
  return ck;
}

}  // namespace medtune::io
