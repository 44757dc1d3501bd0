// Element types of stored tensors. Quantized types follow ggml's block layouts exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace medtune {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F64,
  I64,
  I32,
  Q8_0,  // blocks of 32: f16 scale d, 32 x int8.                x = d * q
  Q4_0,  // blocks of 32: f16 scale d, 16 bytes of nibbles.      x = d * (q - 8)
  Q4_1,  // blocks of 32: f16 d, f16 m, 16 bytes of nibbles.     x = d * q + m
  Q4_K,  // super-blocks of 256 (ggml k-quants)
  Q6_K,  // super-blocks of 256 (ggml k-quants)
  Q5_0,  // blocks of 32: f16 d, 4 bytes of 5th bits, 16 bytes of nibbles.  x = d * (q - 16)
  Q5_1,  // blocks of 32: f16 d, f16 m, 5th bits, nibbles.      x = d * q + m
  Q5_K,  // super-blocks of 256 (ggml k-quants; Q4_K's scales with a 5th bit per value)
  Q2_K,  // super-blocks of 256: 16 sub-blocks of 16, 4-bit scale and min each, 2-bit values
  Q3_K,  // super-blocks of 256: 16 sub-blocks of 16, 6-bit signed scales, 3-bit values
  // llama.cpp's non-linear 4-bit types: nibbles index a fixed table of 16 int8 values
  // (core/kquant_layout.h kIq4nlValues).
  IQ4_NL,  // blocks of 32: f16 d, 16 bytes of nibbles (Q4_0's order).  x = d * table[q]
  IQ4_XS,  // super-blocks of 256: f16 d, 6-bit scales per 32 (stored + 32), nibbles as IQ4_NL's
  // bitsandbytes NF4 in medtune's row form (core/nf4.h): blocks of 64, f32 absmax (double
  // quantization already resolved) then 32 bytes, first element in the high nibble.
  //                                                             x = absmax * nf4_code[q]
  NF4,
};

// Name as in safetensors / ggml ("F32", "BF16", "Q4_1", ...).
std::string_view dtype_name(DType t);

// Elements per block (1 for plain types) and bytes per block.
int64_t dtype_block_elems(DType t);
int64_t dtype_block_bytes(DType t);

// Bytes needed for n elements; n must be a multiple of the block size (checked by callers).
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  return n / dtype_block_elems(t) * dtype_block_bytes(t);
}

inline bool dtype_is_quantized(DType t) { return dtype_block_elems(t) > 1; }

}  // namespace medtune
