// Internal to core/quant_int8*.cpp: one entry point per ISA file (quant_int8_<isa>.cpp), each
// compiled with that ISA's flags (cmake/isa_kernels.cmake) and called only on a CPU that has it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/quant_int8.h"

namespace medtune::int8_detail {

// The weights under activation block b of a row, as integers: element e = d * lane_mul[e / 4] *
// w[e] + m. lane_mul is 1 except for Q6_K, whose sub-blocks of 16 have their own int8 scales
// (kept as integers: lane sums are multiplied by them exactly, as the kernels do). The one
// decoding of every type's blocks that the scalar references share (quant_int8.cpp).
struct WeightBlock {
  int w[int8::kBlock];
  int lane_mul[8];
  float d, m;
};
void weight_block(DType t, const uint8_t* row, int64_t b, WeightBlock* wb);

// Rows r < nrows of W (at w + r * row_bytes) against ntok tokens: y[k * y_stride + r].
using DotRowsFn = void (*)(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x,
                           int64_t nblocks, int64_t ntok, float* y, int64_t y_stride);

void dot_rows_avx2(DType, const uint8_t*, int64_t, int64_t, const int8::BlockQ8*, int64_t, int64_t, float*, int64_t);
void dot_rows_avxvnni(DType, const uint8_t*, int64_t, int64_t, const int8::BlockQ8*, int64_t, int64_t, float*, int64_t);
void dot_rows_avx512vnni(DType, const uint8_t*, int64_t, int64_t, const int8::BlockQ8*, int64_t, int64_t, float*,
                         int64_t);

}  // namespace medtune::int8_detail
