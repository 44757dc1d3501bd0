// Dequantization of stored weights into fp32, bit-exact with ggml's reference
// (dequantize_row_* in ggml-quants.c) and with PyTorch's f16/bf16 -> f32.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace medtune {

// Converts n elements starting at the beginning of `src` (n a multiple of the block size of t).
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K. Throws Internal on other types.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// dot(dequantize(src[0:n]), x[0:n]) without materializing the row: the decode (gemv) path.
// Equal to dequantize_row followed by a dot product up to fp32 summation order.
float dot_row(DType t, const void* src, const float* x, int64_t n);

}  // namespace medtune
