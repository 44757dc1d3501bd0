// core/half.h: the branch-free bf16 rounding used by `precision: bf16` against f32_to_bf16.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace medtune {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Half, RoundThroughBf16IsF32ToBf16BitForBit) {
  // Every 251st bit pattern (17M of them, all exponents and signs, NaNs and infinities among them)
  // and the edges: ties to even, the largest finite values, signed zeros, denormals, quiet and
  // signalling NaNs.
  auto check = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    const uint32_t want = static_cast<uint32_t>(f32_to_bf16(f)) << 16;
    ASSERT_EQ(bits(round_through_bf16(f)), want) << std::hex << "input 0x" << u;
  };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) check(static_cast<uint32_t>(u));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u,
                     0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
                     0xffffffffu, 0x7fbfffffu})
    check(u);
}

}  // namespace
}  // namespace medtune
