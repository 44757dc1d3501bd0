// SwiGLU over one block of elements, shared by swiglu_forward (elementwise.cpp) and the int8
// route's fused gate and up products (linear_int8.cpp), so that both give every element the same
// bits. Compiled for the build's baseline only (vec_exp.h's reason).
#pragma once

#include <cstdint>

#include "ops/cpu/vec_exp.h"

namespace medtune::ops::detail {

// h[j] = gate[j] / (1 + exp(-gate[j])) * up[j] for j < m <= kExpBlock: exp(-gate) for the block
// with the vector exp, then the rest elementwise. Every element's operations are the same wherever
// it falls in a block (vec_exp.h), so the result does not depend on how an array is cut into
// blocks.
inline void swiglu_block(float* h, const float* gate, const float* up, int64_t m) {
  float e[kExpBlock] = {};  // exp(-gate) (zeroed: GCC cannot see exp_neg fill it)
  exp_neg(e, gate, m);
  // Vectorized by the pragma only: GCC 12's -O2 cost model left the loop scalar, one vdivss per
  // element (swiglu_forward on hot data: 1.5 ns an element before, 0.8 after; Intel Xeon, one
  // thread, session 49). Each element's operations are the same in a vector lane: the same bits.
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) h[j] = gate[j] / (1.0f + e[j]) * up[j];
}

}  // namespace medtune::ops::detail
