// Per-element decode of stored weights on the device, shared by gpu::dequantize (dequantize.cu)
// and gpu::embedding_rows (embedding.cu): decode<T>(src, i, code) is element i of a run of whole
// blocks of type T starting at src. Device code only (includes vendor.h through launch.h).
//
// Bit-exact with the CPU (medtune::dequantize_row, nf4::dequantize_blocks):
//   F32        the bits as stored;
//   F16/BF16   exact conversions;
//   Q8_0/Q4_0  x = q·d with |q| ≤ 128 and an f16 d (11-bit significand): the product is exact;
//   Q4_1       x = q·d + m: q·d exact, so one rounding whether or not it is contracted into an FMA;
//   NF4        x = code[q]·absmax: one fp32 product, one rounding.
// So any order and any contraction give the CPU's bits (src/core/quant.cpp states the same).
// Bytes are read as bytes (little-endian): no alignment beyond a byte is assumed of src.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/nf4.h"
#include "gpu/launch.h"

namespace medtune::gpu::decode_detail {

inline constexpr int64_t kQK = 32;  // ggml's legacy block: Q8_0, Q4_0, Q4_1
inline constexpr int64_t kQ8_0Bytes = 34, kQ4_0Bytes = 18, kQ4_1Bytes = 20;

// bitsandbytes' 16 NF4 values, passed to kernels by value from nf4::kCode (no second copy of the
// table in the sources).
struct Nf4Code {
  float v[16];
};
inline Nf4Code nf4_code() {
  Nf4Code code{};
  for (int k = 0; k < 16; ++k) code.v[k] = nf4::kCode[static_cast<size_t>(k)];
  return code;
}

// A type as a value, for dispatching a runtime DType onto kernel<T> through one generic lambda.
template <DType T>
using TypeTag = std::integral_constant<DType, T>;

// Calls f(TypeTag<t>{}) for a decodable type t (supported(t)), nothing otherwise: the one switch
// from a runtime DType to compile-time kernels, for every kernel that decodes stored weights.
template <typename F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(TypeTag<DType::F32>{}); break;
    case DType::F16: f(TypeTag<DType::F16>{}); break;
    case DType::BF16: f(TypeTag<DType::BF16>{}); break;
    case DType::Q8_0: f(TypeTag<DType::Q8_0>{}); break;
    case DType::Q4_0: f(TypeTag<DType::Q4_0>{}); break;
    case DType::Q4_1: f(TypeTag<DType::Q4_1>{}); break;
    case DType::NF4: f(TypeTag<DType::NF4>{}); break;
    default: break;
  }
}

// The types decode<T> handles (the rest throw in the host wrappers).
inline bool supported(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::NF4:
      return true;
    default:
      return false;
  }
}

__device__ inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
__device__ inline float load_f32(const uint8_t* p) {
  const unsigned u = static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8) |
                     (static_cast<unsigned>(p[2]) << 16) | (static_cast<unsigned>(p[3]) << 24);
  return __uint_as_float(u);
}

// Element i of the blocks at src.
template <DType T>
__device__ inline float decode(const uint8_t* src, int64_t i, const Nf4Code& code) {
  if constexpr (T == DType::F32) {
    return load_f32(src + 4 * i);
  } else if constexpr (T == DType::F16) {
    return half_bits_to_float(load_u16(src + 2 * i));
  } else if constexpr (T == DType::BF16) {
    return bf16_bits_to_float(load_u16(src + 2 * i));
  } else if constexpr (T == DType::Q8_0) {
    // 34 B / 32: d f16 | qs[32] int8.   x = q·d
    const uint8_t* blk = src + (i / kQK) * kQ8_0Bytes;
    const float d = half_bits_to_float(load_u16(blk));
    return static_cast<float>(static_cast<int8_t>(blk[2 + i % kQK])) * d;
  } else if constexpr (T == DType::Q4_0) {
    // 18 B / 32: d f16 | qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
    //   x = (q − 8)·d
    const uint8_t* blk = src + (i / kQK) * kQ4_0Bytes;
    const int j = static_cast<int>(i % kQK);
    const float d = half_bits_to_float(load_u16(blk));
    const int q = j < kQK / 2 ? (blk[2 + j] & 0xF) : (blk[2 + j - kQK / 2] >> 4);
    return static_cast<float>(q - 8) * d;
  } else if constexpr (T == DType::Q4_1) {
    // 20 B / 32: d f16 | m f16 | qs[16], nibbles as Q4_0.   x = q·d + m
    const uint8_t* blk = src + (i / kQK) * kQ4_1Bytes;
    const int j = static_cast<int>(i % kQK);
    const float d = half_bits_to_float(load_u16(blk));
    const float m = half_bits_to_float(load_u16(blk + 2));
    const int q = j < kQK / 2 ? (blk[4 + j] & 0xF) : (blk[4 + j - kQK / 2] >> 4);
    return static_cast<float>(q) * d + m;
  } else {
    static_assert(T == DType::NF4, "decode<T>: no device decode for this type");
    // medtune's row blocks, 36 B / 64: f32 absmax | 32 bytes, element 2k in the HIGH nibble of
    // byte k.   x = code[q]·absmax
    const uint8_t* blk = src + (i / nf4::kBlock) * nf4::kRowBlockBytes;
    const int j = static_cast<int>(i % nf4::kBlock);
    const uint8_t byte = blk[4 + j / 2];
    const int q = (j % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
    return code.v[q] * load_f32(blk);
  }
}

}  // namespace medtune::gpu::decode_detail
