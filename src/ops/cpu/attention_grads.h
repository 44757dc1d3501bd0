// What the attention backward at fp32 (attention_backward.cpp) and at bf16 (attention_bf16.cpp)
// share. Internal to src/ops/cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/ops.h"

namespace medtune::ops::detail {

// Internal unless s is a training shape: past == 0, Smax >= T, NH a multiple of NKV.
void check_training_shape(const AttentionShape& s);

// The calling thread's per-head dK (which = 0) or dV (1) scratch of at least n floats, kept
// between calls: 1.2 MB each per 512 tokens of SmolLM2, which a fresh vector zero-filled at every
// layer (~1% of a training step). Garbage on entry: a block's last query tile writes all of its
// rows before the earlier tiles add into them.
float* head_scratch(int which, size_t n);

// The backward's last pass: dk, dv (B, Smax, NKV, HD) rows [0, T) of each batch row = the sums
// over each kv head's group of query heads (in head order, deterministic) of dk_heads, dv_heads
// (B, T, NH, HD); with NH == NKV the heads wrote dk, dv directly and those rows are left as they
// are. Rows [T, Smax), which the forward never reads, get zeros.
void finish_kv_grads(float* dk, float* dv, const float* dk_heads, const float* dv_heads,
                     const AttentionShape& s);

// Σ_c a_c·b_c over n elements in double, in 8 partial sums: a fixed order that vectorizes (one
// running sum, a 4-cycle add chain per element, was a tenth of the bf16 backward's time).
inline double dot_f64(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j)
      acc[j] += static_cast<double>(a[c + j]) * static_cast<double>(b[c + j]);
  double sum = 0;
  for (; c < n; ++c) sum += static_cast<double>(a[c]) * static_cast<double>(b[c]);
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  return sum;
}

}  // namespace medtune::ops::detail
