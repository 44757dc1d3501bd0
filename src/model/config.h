// Hyper-parameters of a Llama-family decoder (llama, mistral, qwen2), whatever file they came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace medtune {

struct RopeScaling {
  std::string type;  // "" (none) or "llama3"; other types are rejected at load time
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // "llama", "mistral" or "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // F (MLP width)
  int64_t num_hidden_layers = 0;  // L
  int64_t num_attention_heads = 0;  // NH
  int64_t num_key_value_heads = 0;  // NKV (GQA groups); == NH for MHA
  int64_t head_dim = 0;             // HD; usually C / NH but stored separately by some configs
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // llama.cpp's rope_freqs.weight (HD/2), how its converter stores llama3 scaling in a GGUF: the
  // frequency of pair i is base^(-2i/HD) / rope_freq_factors[i]. Empty when the file has none;
  // when set it replaces rope_scaling (as in llama.cpp).
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (qwen2)
  int64_t sliding_window = 0;   // mistral: 0 = none; we attend causally to everything (see docs)
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // as declared in config.json ("bfloat16", ...), informational
};

}  // namespace medtune
