// Quantization of fp32 rows into ggml block formats, bit-exact with ggml's reference
// (quantize_row_*_ref in ggml-quants.c) and gguf-py's gguf.quants.quantize, which llama.cpp's
// convert_hf_to_gguf.py uses to write --outtype q8_0 files.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace medtune {

// Q8_0: per block of 32, d = max|x| / 127 (fp32), q = round-half-away(x / d) computed as x * (1/d)
// in fp32 (0 when d == 0), d stored as f16 (round to nearest even). n must be a multiple of 32;
// dst receives n / 32 * 34 bytes.
void quantize_row_q8_0(const float* src, uint8_t* dst, int64_t n);

// A whole row-major matrix into F32, F16, BF16 or Q8_0 bytes (rows of `cols` elements; for Q8_0
// cols must be a multiple of 32). Throws Internal for other dtypes or bad sizes.
std::vector<uint8_t> encode_f32(DType t, const float* src, int64_t rows, int64_t cols);

}  // namespace medtune
