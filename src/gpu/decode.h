// Per-element decode of stored weights on the device, shared by gpu::dequantize (dequantize.cu)
// and gpu::embedding_rows (embedding.cu): decode<T>(src, i, code) is element i of a run of whole
// blocks of type T starting at src. Device code only (includes vendor.h through launch.h); the
// block types are gpu/block_decode.h's host-and-device functions, tested on the CPU.
//
// Bit-exact with the CPU (medtune::dequantize_row, nf4::dequantize_blocks):
//   F32        the bits as stored;
//   F16/BF16   exact conversions;
//   Q8_0/Q4_0  x = q·d with |q| ≤ 128 and an f16 d (11-bit significand): the product is exact;
//   Q5_0       x = (q − 16)·d: exact as Q4_0;
//   Q4_1/Q5_1  x = q·d + m: q·d exact, so one rounding whether or not it is contracted into an FMA;
//   Q4_K/Q5_K  x = (d·sc)·q − dmin·m: every product exact (≤ 22 bits), one rounding at the end;
//   Q2_K       the same with 4-bit sc, m and 2-bit q; Q3_K x = (d·sc)·q, 6-bit sc, 3-bit q: exact;
//   Q6_K       x = (d·sc)·(q − 32): d·sc exact, one rounding, no add;
//   IQ4_NL     x = table[q]·d, IQ4_XS x = (d·(sc − 32))·table[q]: |table| <= 127, exact;
//   NF4        x = code[q]·absmax: one fp32 product, one rounding.
// So any order and any contraction give the CPU's bits (src/core/quant.cpp states the same).
// Bytes are read as bytes (little-endian): no alignment beyond a byte is assumed of src.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/nf4.h"
#include "gpu/block_decode.h"
#include "gpu/launch.h"

namespace medtune::gpu::decode_detail {

static_assert(block_decode::kNf4Block == nf4::kBlock && block_decode::kNf4Bytes == nf4::kRowBlockBytes,
              "block_decode's NF4 layout is medtune's row blocks");

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
    case DType::Q4_K: f(TypeTag<DType::Q4_K>{}); break;
    case DType::Q6_K: f(TypeTag<DType::Q6_K>{}); break;
    case DType::Q5_0: f(TypeTag<DType::Q5_0>{}); break;
    case DType::Q5_1: f(TypeTag<DType::Q5_1>{}); break;
    case DType::Q5_K: f(TypeTag<DType::Q5_K>{}); break;
    case DType::Q2_K: f(TypeTag<DType::Q2_K>{}); break;
    case DType::Q3_K: f(TypeTag<DType::Q3_K>{}); break;
    case DType::IQ4_NL: f(TypeTag<DType::IQ4_NL>{}); break;
    case DType::IQ4_XS: f(TypeTag<DType::IQ4_XS>{}); break;
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
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::NF4:
      return true;
    default:
      return false;
  }
}

// The conversions block_decode's functions take, as the device does them.
struct DeviceF16 {
  __device__ float operator()(uint16_t bits) const { return half_bits_to_float(bits); }
};
struct DeviceU32 {
  __device__ float operator()(uint32_t bits) const { return __uint_as_float(bits); }
};

// Element i of the blocks at src.
template <DType T>
__device__ inline float decode(const uint8_t* src, int64_t i, const Nf4Code& code) {
  using block_decode::load_u16;
  if constexpr (T == DType::F32) {
    return __uint_as_float(block_decode::load_u32(src + 4 * i));
  } else if constexpr (T == DType::F16) {
    return half_bits_to_float(load_u16(src + 2 * i));
  } else if constexpr (T == DType::BF16) {
    return bf16_bits_to_float(load_u16(src + 2 * i));
  } else if constexpr (T == DType::Q8_0) {
    return block_decode::q8_0(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q4_0) {
    return block_decode::q4_0(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q4_1) {
    return block_decode::q4_1(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q4_K) {
    return block_decode::q4_k(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q6_K) {
    return block_decode::q6_k(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q5_0) {
    return block_decode::q5_0(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q5_1) {
    return block_decode::q5_1(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q5_K) {
    return block_decode::q5_k(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q2_K) {
    return block_decode::q2_k(src, i, DeviceF16{});
  } else if constexpr (T == DType::Q3_K) {
    return block_decode::q3_k(src, i, DeviceF16{});
  } else if constexpr (T == DType::IQ4_NL) {
    return block_decode::iq4_nl(src, i, DeviceF16{});
  } else if constexpr (T == DType::IQ4_XS) {
    return block_decode::iq4_xs(src, i, DeviceF16{});
  } else {
    static_assert(T == DType::NF4, "decode<T>: no device decode for this type");
    return block_decode::nf4(src, i, code.v, DeviceU32{});
  }
}

}  // namespace medtune::gpu::decode_detail
