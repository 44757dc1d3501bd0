#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace medtune::model {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    const float p = std::pow(static_cast<float>(c.rope_theta), expo);
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  if (c.rope_scaling.type == "llama3") {
    // transformers' _compute_llama3_parameters, elementwise in fp32.
    const auto& s = c.rope_scaling;
    const float factor = static_cast<float>(s.factor);
    const float low = static_cast<float>(s.low_freq_factor);
    const float high = static_cast<float>(s.high_freq_factor);
    const float old_ctx = static_cast<float>(s.original_max_position_embeddings);
    const float low_freq_wavelen = old_ctx / low;
    const float high_freq_wavelen = old_ctx / high;
    for (float& f : inv) {
      const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

void rope_tables(const std::vector<float>& inv_freq, const int64_t* positions, int64_t N,
                 float* cos, float* sin) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t n = 0; n < N; ++n) {
    const float pos = static_cast<float>(positions[n]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];
      cos[n * half + i] = std::cos(angle);
      sin[n * half + i] = std::sin(angle);
    }
  }
}

}  // namespace medtune::model
