// IEEE half and bfloat16 <-> float, bit-exact with PyTorch / ggml (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace medtune {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet), as torch does.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// bf16_to_f32(f32_to_bf16(f)) without a branch, so that loops over arrays vectorize (the rounding
// of `precision: bf16`, ops/cpu/linear_bf16.cpp). Bit for bit the same (test_core Half.*). Also
// the GPU's, where a kernel rounds a weight itself (gpu/gemv.cu).
// __builtin_memcpy: the bit cast every compiler here takes in host and device code alike (hipcc
// refuses std::memcpy in a __device__ function; GCC emits the same move for both).
MEDTUNE_HOST_DEVICE inline float round_through_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  const uint32_t out = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  __builtin_memcpy(&f, &out, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, overflow to inf, as _cvtss_sh / torch.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // overflow (>= 65520) -> inf
  if (x < 0x38800000u) {  // subnormal or zero in half
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e-150) and the half subnormal unit is 2^-24, so q = m >> (126 - e), rounded.
    const uint32_t s = 126 - e;  // 14..24
    uint32_t q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1);
    const uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t u = x + 0xc8000fffu + ((x >> 13) & 1u);  // rebias (-112 << 23) and round
  return static_cast<uint16_t>(sign | (u >> 13));
}

}  // namespace medtune
