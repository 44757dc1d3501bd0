// Internal to core/nf4*.cpp: the AVX2 kernels of nf4_avx2.cpp (compiled with -mavx2 -mfma
// whatever the baseline, called only when core/cpu_features.h says this CPU has them). Each is
// bit-identical to its scalar counterpart in nf4.cpp except dot_blocks_avx2's summation order.
#pragma once

#include <cstdint>

namespace medtune::nf4_detail {

// code16: nf4::kCode.data() (passed in so that this file's kernels touch no inline library code).
void dequantize_blocks_avx2(const uint8_t* blocks, float* out, int64_t n, const float* code16);
// `nblocks` whole blocks of bnb's flat layout (packed codes, one absmax per 64 values).
void dequantize_full_blocks_avx2(const uint8_t* packed, const float* absmax, float* out,
                                 int64_t nblocks, const float* code16);
float dot_blocks_avx2(const uint8_t* blocks, const float* x, int64_t n, const float* code16);

}  // namespace medtune::nf4_detail
