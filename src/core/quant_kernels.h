// Internal to core/quant*.cpp: the scalar reference, the per-ISA kernels (quant_avx2.cpp) and the
// few scalar helpers those kernels share with the reference. The helpers are ordinary (non-inline)
// functions of quant.cpp on purpose: an inline function instantiated in a file compiled with
// -mavx2 could be the copy the linker keeps for every caller, and would then run AVX2 code on a
// CPU without it (cmake/isa_kernels.cmake).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace medtune::quant_detail {

void dequantize_row_scalar(DType t, const void* src, float* y, int64_t n);
float dot_row_scalar(DType t, const void* src, const float* x, int64_t n);
float dot_row_bf16_scalar(DType t, const void* src, const float* x, int64_t n);
bool has_simd();

float load_f16_scalar(const uint8_t* p);   // f16_to_f32 of 2 little-endian bytes
float load_bf16_scalar(const uint8_t* p);  // bf16_to_f32 of 2 little-endian bytes
float round_bf16_scalar(float f);          // round_through_bf16 (core/half.h)
// Per-sub-block factors of one Q4_K super-block: x = ds[k]*q - dm[k] (quant.cpp).
void q4k_block_factors(const uint8_t* blk, float d, float dmin, float ds[8], float dm[8]);

// quant_avx2.cpp (AVX2 + FMA + F16C): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K; n checked by the caller. Bit-exact with the scalar reference for dequantization; dot order as quant.cpp says.
void dequantize_row_avx2(DType t, const uint8_t* p, float* y, int64_t n);
float dot_row_avx2(DType t, const uint8_t* p, const float* x, int64_t n);
float dot_row_bf16_avx2(DType t, const uint8_t* p, const float* x, int64_t n);
// dot_lanes8 (core/quant.h) for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; false for other
// types.
bool dot_lanes8_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const float* const* x, int ntok,
                     int64_t n, float* lanes);

}  // namespace medtune::quant_detail
