// Stand-in for ROCm's hip/hip_bfloat16.h under HIP-CPU (which has none): the 2-byte storage type
// src/gpu/vendor.h names and the bit cast it uses. Its conversions are placeholders (0): no file
// this harness compiles converts bf16 (scripts/hip-cpu-check.sh lists them).
#pragma once

#include <cstdint>
#include <cstring>

struct hip_bfloat16 {
  uint16_t data;
  hip_bfloat16() = default;
  explicit hip_bfloat16(float) : data(0) {}
  explicit operator float() const { return 0.0f; }
};

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
