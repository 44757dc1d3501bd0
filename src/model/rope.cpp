#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace medtune::model {

namespace {

// llama3 scaling's parameters in fp32 and its three frequency bands (by wavelength): below
// high_freq_wavelen unchanged, above low_freq_wavelen divided by factor, in between blended by
// smooth(). Shared by transformers' formula (rope_inv_freq) and llama.cpp's divisors.
struct Llama3Bands {
  explicit Llama3Bands(const RopeScaling& s)
      : factor(static_cast<float>(s.factor)),
        low(static_cast<float>(s.low_freq_factor)),
        high(static_cast<float>(s.high_freq_factor)),
        old_ctx(static_cast<float>(s.original_max_position_embeddings)),
        low_freq_wavelen(old_ctx / low),
        high_freq_wavelen(old_ctx / high) {}
  static float wavelength(float freq) { return static_cast<float>(2 * std::numbers::pi) / freq; }
  bool medium(float wavelen) const { return !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen); }
  float smooth(float wavelen) const { return (old_ctx / wavelen - low) / (high - low); }

  float factor, low, high, old_ctx, low_freq_wavelen, high_freq_wavelen;
};

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    const float p = std::pow(static_cast<float>(c.rope_theta), expo);
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  if (!c.rope_freq_factors.empty()) {
    // llama.cpp (ggml_rope_ext with freq_factors): theta_i = pos * base^(-2i/d) / factor_i.
    for (int64_t i = 0; i < half; ++i) inv[static_cast<size_t>(i)] /= c.rope_freq_factors[static_cast<size_t>(i)];
  } else if (c.rope_scaling.type == "llama3") {
    // transformers' _compute_llama3_parameters, elementwise in fp32.
    const Llama3Bands b(c.rope_scaling);
    for (float& f : inv) {
      const float wavelen = Llama3Bands::wavelength(f);
      float scaled = wavelen > b.low_freq_wavelen ? f / b.factor : f;
      if (b.medium(wavelen)) {
        const float smooth = b.smooth(wavelen);
        scaled = (1.0f - smooth) * scaled / b.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c) {
  if (c.rope_scaling.type != "llama3") throw Internal("llama3_rope_freq_factors: no llama3 rope scaling");
  ModelConfig unscaled = c;
  unscaled.rope_scaling = RopeScaling{};
  unscaled.rope_freq_factors.clear();
  const std::vector<float> freqs = rope_inv_freq(unscaled);
  const Llama3Bands b(c.rope_scaling);
  std::vector<float> factors;
  factors.reserve(freqs.size());
  for (const float freq : freqs) {
    const float wavelen = Llama3Bands::wavelength(freq);
    if (wavelen < b.high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > b.low_freq_wavelen) {
      factors.push_back(b.factor);
    } else {
      const float smooth = b.smooth(wavelen);
      factors.push_back(1.0f / ((1.0f - smooth) / b.factor + smooth));
    }
  }
  return factors;
}

std::optional<RopeScaling> llama3_scaling_from_factors(const ModelConfig& c) {
  if (c.rope_freq_factors.empty()) return std::nullopt;
  ModelConfig guess = c;
  guess.rope_freq_factors.clear();
  guess.rope_scaling = RopeScaling{"llama3", 1.0, 1.0, 4.0, 8192};
  for (const float f : c.rope_freq_factors) guess.rope_scaling.factor = std::max(guess.rope_scaling.factor, static_cast<double>(f));
  const std::vector<float> want = llama3_rope_freq_factors(guess);
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = c.rope_freq_factors[i];
    if (std::fabs(got - static_cast<double>(want[i])) > 1e-6 * got) return std::nullopt;
  }
  return guess.rope_scaling;
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
