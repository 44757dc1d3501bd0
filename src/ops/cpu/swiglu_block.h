// SwiGLU over a run of elements, shared by swiglu_forward (elementwise.cpp) and the int8 route's
// fused gate and up products (linear_int8.cpp), so that both give every element the same bits.
// Compiled for the build's baseline only (vec_exp.h's reason).
#pragma once

#include <cstdint>

#include "ops/cpu/vec_exp.h"

namespace medtune::ops::detail {

// h[j] = gate[j] / (1 + exp(-gate[j])) * up[j] for j < m: 8 elements at a time with the vector
// exp, the rest one by one with the same kernel (vec_exp.h's exp1). Every element's operations
// are the same wherever it falls, so the result does not depend on how an array is cut into
// runs. In registers: GCC 12's -O2 cost model left the elementwise loop after a block's
// exp(-gate) scalar (one vdivss per element), and its 1 KiB buffer was zeroed per call, too much
// for the fused path's runs of 48. swiglu_forward on hot data, one thread, Intel Xeon: 1.58 ns
// an element before (session 49).
inline void swiglu_block(float* h, const float* gate, const float* up, int64_t m) {
  int64_t j = 0;
#if MEDTUNE_VEC_EXP
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  for (; j + 8 <= m; j += 8) {
    const __m256 g = _mm256_loadu_ps(gate + j);
    const __m256 e = exp8(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(
        h + j, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + j)));
  }
#endif
  for (; j < m; ++j) h[j] = gate[j] / (1.0f + exp1(-gate[j])) * up[j];
}

}  // namespace medtune::ops::detail
