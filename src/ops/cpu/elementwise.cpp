// Elementwise ops: SwiGLU, residual add, rotary embedding, the GGUF q/k row order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/swiglu_block.h"
#include "ops/cpu/vec_exp.h"
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
  // Blocks of kExpBlock elements dealt to the threads, each by swiglu_block.h.
  const int64_t blocks = (n + detail::kExpBlock - 1) / detail::kExpBlock;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * detail::kExpBlock, m = std::min(detail::kExpBlock, n - i0);
    detail::swiglu_block(h + i0, gate + i0, up + i0, m);
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

namespace {
// Per head of x (N*H heads of HD): GGUF element 2*i + j <-> HF element j*(HD/2) + i, towards HF
// order (to_hf) or back.
void permute_gguf_qk(float* x, int64_t N, int64_t H, int64_t HD, bool to_hf) {
  const int64_t half = HD / 2;
  std::vector<float> tmp(static_cast<size_t>(HD));
  for (int64_t nh = 0; nh < N * H; ++nh) {
    float* head = x + nh * HD;
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf = 2 * i + j, hf = j * half + i;
        tmp[static_cast<size_t>(to_hf ? hf : gguf)] = head[to_hf ? gguf : hf];
      }
    for (int64_t d = 0; d < HD; ++d) head[d] = tmp[static_cast<size_t>(d)];
  }
}
}  // namespace

void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) { permute_gguf_qk(x, N, H, HD, true); }

void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) { permute_gguf_qk(x, N, H, HD, false); }

bool vec_exp_compiled() { return MEDTUNE_VEC_EXP != 0; }

}  // namespace medtune::ops
