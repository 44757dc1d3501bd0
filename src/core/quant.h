// Dequantization of stored weights into fp32, bit-exact with ggml's reference
// (dequantize_row_* in ggml-quants.c) and with PyTorch's f16/bf16 -> f32.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace medtune {

// Converts n elements starting at the beginning of `src` (n a multiple of the block size of t).
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. Throws Internal on other types.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// dot(dequantize(src[0:n]), x[0:n]) without materializing the row: the decode (gemv) path.
// Equal to dequantize_row followed by a dot product up to fp32 summation order.
float dot_row(DType t, const void* src, const float* x, int64_t n);

// dot_row with every dequantized value first rounded to bf16 (core/half.h round_through_bf16,
// round to nearest even) and x used as given: the decode path of `precision: bf16`, whose caller
// rounds x. Each product of two bf16 values is exact in fp32, so this equals the exact dot of
// the rounded values up to fp32 summation order. Same types as dot_row.
float dot_row_bf16(DType t, const void* src, const float* x, int64_t n);

// The 8-lane partial sums of dequantize_row(row j) . x_t, without writing the row out: for rows
// j < nrows (at w + j * row_bytes) and tokens t < ntok (1..4), lanes[(j * ntok + t) * 8 + l] is
// acc after acc = fma(value[k], x_t[k], acc) for k = l, l + 8, l + 16, ... < n, ascending, from
// acc = 0, with value = exactly dequantize_row's. The server's batch-invariant products
// (ops/cpu/linear_invariant.cpp) are defined by that order and reduce the lanes themselves.
// Returns false, computing nothing, where there is no fused kernel (not Q8_0/Q4_0/Q4_1/Q5_0/
// Q5_1/Q4_K/Q5_K/Q6_K, or no AVX2 on this CPU or under MEDTUNE_ISA): the caller then dequantizes
// and dots.
bool dot_lanes8(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const float* const* x, int ntok,
                int64_t n, float* lanes);

}  // namespace medtune
