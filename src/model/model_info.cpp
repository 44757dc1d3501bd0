#include "model/model_info.h"

#include <algorithm>
#include <sstream>

namespace medtune::model {

namespace {
std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream s;
  s.precision(u == 0 ? 0 : 1);
  s << std::fixed << v << " " << units[u];
  return s.str();
}
}  // namespace

ModelInfo describe(const io::Checkpoint& ckpt, int64_t context) {
  ModelInfo m;
  const ModelConfig& c = ckpt.config;
  m.path = ckpt.path;
  m.format = ckpt.format;
  m.architecture = c.architecture;
  m.config = c;
  for (const auto& [name, t] : ckpt.tensors) {
    m.parameters += t.numel();
    m.weight_bytes += t.nbytes;
    m.dtype_tensors[std::string(dtype_name(t.dtype))] += 1;
  }
  m.kv_bytes_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4;
  m.context = context > 0 ? context : std::min<int64_t>(c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096, 4096);
  // Activations of one forward over `context` tokens: the residual stream and its norm (2C),
  // q, k, v, attention output (~2C + 2 NKV HD), MLP gate and up (2F), fp32, plus one (T, T)
  // score matrix per thread and the logits of one position.
  const int64_t per_token = 4 * (4 * c.hidden_size + 2 * c.num_key_value_heads * c.head_dim + 2 * c.intermediate_size);
  const int64_t activations = per_token * m.context + 4 * m.context * m.context + 4 * c.vocab_size;
  m.estimated_bytes = m.weight_bytes + m.kv_bytes_per_token * m.context + activations;
  return m;
}

nlohmann::json to_json(const ModelInfo& m) {
  const ModelConfig& c = m.config;
  nlohmann::json j;
  j["path"] = m.path;
  j["format"] = m.format;
  j["architecture"] = m.architecture;
  j["parameters"] = m.parameters;
  j["weight_bytes"] = m.weight_bytes;
  j["tensor_dtypes"] = m.dtype_tensors;
  j["config"] = {{"vocab_size", c.vocab_size},
                 {"hidden_size", c.hidden_size},
                 {"intermediate_size", c.intermediate_size},
                 {"num_hidden_layers", c.num_hidden_layers},
                 {"num_attention_heads", c.num_attention_heads},
                 {"num_key_value_heads", c.num_key_value_heads},
                 {"head_dim", c.head_dim},
                 {"max_position_embeddings", c.max_position_embeddings},
                 {"rms_norm_eps", c.rms_norm_eps},
                 {"rope_theta", c.rope_theta},
                 {"rope_scaling", c.rope_scaling.type.empty() ? "none" : c.rope_scaling.type},
                 {"tie_word_embeddings", c.tie_word_embeddings},
                 {"attention_bias", c.attention_bias},
                 {"sliding_window", c.sliding_window}};
  j["memory"] = {{"context", m.context},
                 {"kv_cache_bytes_per_token", m.kv_bytes_per_token},
                 {"estimated_bytes", m.estimated_bytes}};
  return j;
}

std::string to_text(const ModelInfo& m) {
  const ModelConfig& c = m.config;
  std::ostringstream s;
  s << "model         " << m.path << " (" << m.format << ")\n"
    << "architecture  " << m.architecture << "\n"
    << "parameters    " << m.parameters << " (" << human_bytes(m.weight_bytes) << " as stored, memory-mapped)\n"
    << "layers        " << c.num_hidden_layers << ", hidden " << c.hidden_size << ", mlp "
    << c.intermediate_size << ", heads " << c.num_attention_heads << " (kv " << c.num_key_value_heads
    << ", head_dim " << c.head_dim << ")\n"
    << "vocabulary    " << c.vocab_size << (c.tie_word_embeddings ? " (tied embeddings)" : "") << "\n"
    << "rope          theta " << c.rope_theta
    << (c.rope_scaling.type.empty() ? "" : ", scaling " + c.rope_scaling.type) << "\n"
    << "dtypes       ";
  for (const auto& [name, n] : m.dtype_tensors) s << " " << name << " x" << n;
  s << "\n"
    << "memory        ~" << human_bytes(m.estimated_bytes) << " for a " << m.context
    << "-token context (KV cache " << human_bytes(m.kv_bytes_per_token)
    << "/token in fp32; half that at --precision int8)\n";
  return s.str();
}

}  // namespace medtune::model
