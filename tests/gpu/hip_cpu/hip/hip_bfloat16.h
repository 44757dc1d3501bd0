// Stand-in for ROCm's hip/hip_bfloat16.h under HIP-CPU (which has none): the 2-byte storage type
// src/gpu/vendor.h names, with ROCm 5's conversions (hip_bfloat16.h's float_to_bfloat16: round to
// nearest even; a NaN stays a NaN, its payload's top bit set so that truncation cannot make it an
// infinity), and the bit casts of CUDA's and HIP's device libraries that HIP-CPU lacks.
#pragma once

#include <cstdint>
#include <cstring>

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

struct hip_bfloat16 {
  uint16_t data;
  hip_bfloat16() = default;
  explicit hip_bfloat16(float f) : data(round(f)) {}
  explicit operator float() const { return __uint_as_float(static_cast<unsigned>(data) << 16); }

 private:
  static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (~u & 0x7f800000u) {
      u += 0x7fffu + ((u >> 16) & 1u);  // finite: round to nearest, ties to even
    } else if (u & 0xffffu) {
      u |= 0x10000u;  // NaN with a payload only in the low half: keep it a NaN
    }
    return static_cast<uint16_t>(u >> 16);
  }
};
