#include "model/merge.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"

namespace medtune::model {

namespace {

// "model.layers.<l>.<module>.<proj>.weight" -> (l, proj), or false for any other tensor.
bool parse_projection(const std::string& name, int64_t& layer, Proj& proj) {
  static const std::string kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return false;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos) return false;
  layer = std::stoll(name.substr(kPrefix.size(), dot - kPrefix.size()));
  const std::string rest = name.substr(dot + 1);
  for (int p = 0; p < kNumProj; ++p) {
    const Proj pr = static_cast<Proj>(p);
    const std::string module = (p <= static_cast<int>(Proj::o) ? "self_attn." : "mlp.");
    if (rest == module + proj_name(pr) + ".weight") {
      proj = pr;
      return true;
    }
  }
  return false;
}

// Heads of a q/k projection tensor ("...q_proj.weight" / ".bias"), or 0 for other tensors.
int64_t qk_heads(const ModelConfig& c, const std::string& name) {
  auto ends = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  if (ends("self_attn.q_proj.weight") || ends("self_attn.q_proj.bias")) return c.num_attention_heads;
  if (ends("self_attn.k_proj.weight") || ends("self_attn.k_proj.bias")) return c.num_key_value_heads;
  return 0;
}

std::vector<double> permute_rows(const std::vector<double>& m, int64_t heads, int64_t HD,
                                 int64_t cols, bool to_gguf) {
  std::vector<double> out(m.size());
  const int64_t half = HD / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t g = h * HD + 2 * i + j;     // GGUF row
        const int64_t f = h * HD + j * half + i;  // HF row
        const int64_t dst = to_gguf ? g : f, src = to_gguf ? f : g;
        std::memcpy(&out[static_cast<size_t>(dst * cols)], &m[static_cast<size_t>(src * cols)],
                    static_cast<size_t>(cols) * sizeof(double));
      }
  return out;
}

}  // namespace

std::vector<std::string> merged_tensor_names(const io::Checkpoint& ckpt) {
  const ModelConfig& c = ckpt.config;
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    names.push_back(p + "input_layernorm.weight");
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      names.push_back(p + "self_attn." + proj + ".weight");
      if (ckpt.tensors.count(p + "self_attn." + proj + ".bias"))
        names.push_back(p + "self_attn." + proj + ".bias");
    }
    names.push_back(p + "post_attention_layernorm.weight");
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      names.push_back(p + "mlp." + proj + ".weight");
  }
  names.push_back("model.norm.weight");
  if (!c.tie_word_embeddings) names.push_back("lm_head.weight");
  return names;
}

MergedTensor merge_tensor(const io::Checkpoint& ckpt, const LoraWeights* lora,
                          const std::string& hf_name) {
  auto it = ckpt.tensors.find(hf_name);
  if (it == ckpt.tensors.end()) throw BadInput(ckpt.path + ": missing tensor '" + hf_name + "'");
  const RawTensor& t = it->second;
  MergedTensor m;
  m.hf_name = hf_name;
  m.shape = t.shape;
  const int64_t n = t.numel();
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = n / cols;
  // Exact dequantization (every stored type's values are representable in fp32), row by row.
  std::vector<float> row(static_cast<size_t>(cols));
  m.values.resize(static_cast<size_t>(n));
  const int64_t row_bytes = dtype_row_bytes(t.dtype, cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.dtype, t.data + r * row_bytes, row.data(), cols);
    for (int64_t i = 0; i < cols; ++i) m.values[static_cast<size_t>(r * cols + i)] = row[static_cast<size_t>(i)];
  }
  const int64_t heads = qk_heads(ckpt.config, hf_name);
  if (ckpt.qk_rows_permuted && heads > 0) {
    const int64_t pcols = t.shape.size() == 1 ? 1 : cols;  // a bias is one column
    m.values = permute_rows(m.values, heads, ckpt.config.head_dim, pcols, /*to_gguf=*/false);
  }

  int64_t layer = 0;
  Proj p = Proj::q;
  if (lora == nullptr || !parse_projection(hf_name, layer, p)) return m;
  if (layer >= static_cast<int64_t>(lora->layers.size())) return m;
  const LoraLinear& l = lora->at(layer, p);
  if (!l.enabled()) return m;
  if (l.out != rows || l.in != cols) {
    throw BadInput("adapter for '" + hf_name + "' is (" + std::to_string(l.out) + ", " +
                   std::to_string(l.in) + "), the base tensor is (" + std::to_string(rows) + ", " +
                   std::to_string(cols) + ")");
  }
  // The adapter's effective scale is lora->scaling (alpha/r or alpha/sqrt(r)), taken from the
  // config in fp64 rather than its fp32 copy, so the product is rounded once.
  const double s = lora->config.scaling();
  std::vector<double> ba(static_cast<size_t>(cols));
  for (int64_t o = 0; o < rows; ++o) {
    std::fill(ba.begin(), ba.end(), 0.0);
    for (int64_t k = 0; k < l.r; ++k) {
      const double b = l.B[static_cast<size_t>(o * l.r + k)];
      const float* a = &l.A[static_cast<size_t>(k * cols)];
      for (int64_t i = 0; i < cols; ++i) ba[static_cast<size_t>(i)] += b * static_cast<double>(a[i]);
    }
    double* w = &m.values[static_cast<size_t>(o * cols)];
    for (int64_t i = 0; i < cols; ++i) w[i] += s * ba[static_cast<size_t>(i)];
  }
  return m;
}

float round_once_f32(double x) { return static_cast<float>(x); }

namespace {
// fp64 -> fp32 rounding to odd: an inexact result gets an odd last bit, so a later
// round-to-nearest into a type with fewer than 22 significand bits rounds as x itself would.
float round_to_odd_f32(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(f) || static_cast<double>(f) == x) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 1u) == 0) {
    f = std::nextafter(f, x > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                     : -std::numeric_limits<float>::infinity());
  }
  return f;
}
}  // namespace

uint16_t round_once_f16(double x) { return f32_to_f16(round_to_odd_f32(x)); }
uint16_t round_once_bf16(double x) { return f32_to_bf16(round_to_odd_f32(x)); }

void require_representable(const MergedTensor& m, DType dtype) {
  auto fits = [dtype](double x) {
    switch (dtype) {
      case DType::F16: return (round_once_f16(x) & 0x7C00) != 0x7C00;   // exponent all ones: Inf/NaN
      case DType::BF16: return (round_once_bf16(x) & 0x7F80) != 0x7F80;
      // Q8_0 stores each block's scale max|x| / 127 as f16: the values may not exceed 127 * 65504.
      case DType::Q8_0: return std::isfinite(round_once_f32(x)) && std::abs(x) <= 127.0 * 65504.0;
      default: return std::isfinite(round_once_f32(x));
    }
  };
  for (size_t k = 0; k < m.values.size(); ++k)
    if (!fits(m.values[k])) {
      char value[32];
      std::snprintf(value, sizeof value, "%.6g", m.values[k]);
      throw BadInput("tensor '" + m.hf_name + "' element " + std::to_string(k) + " is " + value +
                     " after the merge, which " + std::string(dtype_name(dtype)) +
                     " cannot hold (it would be written as Inf/NaN): the adapter's values are out of range "
                     "(a run that diverged, or lora_alpha too large?); check the adapter, or export as f32");
    }
}

std::vector<double> permute_rows_hf_to_gguf(const std::vector<double>& m, int64_t heads,
                                            int64_t HD, int64_t cols) {
  if (static_cast<int64_t>(m.size()) != heads * HD * cols || HD % 2 != 0) {
    throw Internal("permute_rows_hf_to_gguf: size does not match heads * HD * cols");
  }
  return permute_rows(m, heads, HD, cols, /*to_gguf=*/true);
}

}  // namespace medtune::model
