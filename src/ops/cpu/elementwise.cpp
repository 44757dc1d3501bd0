// Elementwise ops: SwiGLU, residual add, rotary embedding.
#include <cmath>

#include "ops/ops.h"

namespace medtune::ops {

namespace ref {
void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    h[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) {
  const int64_t half = HD / 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      float* v = x + (n * H + h) * HD;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        const float c = cos[n * half + i], s = sin[n * half + i];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
}
}  // namespace ref

void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    h[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) {
  const int64_t half = HD / 2;
#pragma omp parallel for schedule(static) if (N * H * HD > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* c = cos + n * half;
    const float* s = sin + n * half;
    for (int64_t h = 0; h < H; ++h) {
      float* lo = x + (n * H + h) * HD;
      float* hi = lo + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace medtune::ops
