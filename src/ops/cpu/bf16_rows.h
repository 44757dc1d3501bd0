// The bf16 route's conversions (ops/cpu/linear_bf16.cpp), shared with the other products that
// round their operands as it does (ops/cpu/lm_head_loss_bf16.cpp). Internal to src/ops/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "ops/linear.h"

namespace medtune::ops::detail {

// f32_to_bf16(f), through the branch-free round_through_bf16 so that loops vectorize.
inline uint16_t bf16_bits(float f) {
  const float r = round_through_bf16(f);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return static_cast<uint16_t>(u >> 16);
}

// out (n) = x rounded to bf16 (round to nearest even, core/half.h), threaded for large n.
void round_to_bf16(uint16_t* out, const float* x, int64_t n);
// out (n) = x rounded through bf16 and widened back: round_to_bf16's values, as fp32.
void round_all_through_bf16(float* out, const float* x, int64_t n);
// Rows [r0, r1) of W in bf16, (r1 - r0, cols): a BF16 matrix's own rows, the owner's rounded copy
// (StoredMatrix::bf16), or rows dequantized to fp32 and rounded into `scratch`.
const uint16_t* weight_rows_bf16(const StoredMatrix& w, int64_t r0, int64_t r1,
                                 std::vector<uint16_t>& scratch);
// Rows [r0, r1) of W dequantized and rounded through bf16, as fp32, into `scratch`.
const float* weight_rows_rounded(const StoredMatrix& w, int64_t r0, int64_t r1,
                                 std::vector<float>& scratch);

}  // namespace medtune::ops::detail
