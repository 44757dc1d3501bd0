// fp32 -> bf16 rounding against medtune::f32_to_bf16 (core/half.h, torch's rounding).
// Tolerance: bit-exact for every non-NaN input (round to nearest even is one defined result),
// on random bit patterns (every exponent: subnormals, overflow to inf, infinities) plus the ties
// that decide between even and odd; a NaN must stay a NaN (payload bits are the vendor's).
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gpu/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

void add_case(Registry& r, int64_t n, bool quick) {
  r.add("convert/f32_to_bf16," + shape({{"n", n}}), quick, [=](Checks& c, const gpu::Stream& s) {
    const std::vector<uint8_t> bytes = random_bytes(static_cast<size_t>(n) * 4, 81);
    std::vector<float> x(static_cast<size_t>(n));
    std::memcpy(x.data(), bytes.data(), bytes.size());
    // Exact ties (low 16 bits 0x8000) with even and odd kept halves, and the largest finite
    // values, which round to inf.
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0x7f7f8000u,
                                0x00008000u, 0x00018000u, 0x80000000u};
    for (size_t k = 0; k < sizeof special / sizeof special[0] && k < x.size(); ++k)
      std::memcpy(&x[k], &special[k], 4);
    std::vector<uint16_t> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = f32_to_bf16(x[i]);
    GuardedDevice<float> d_x(x, s);
    GuardedDevice<uint16_t> d_y(x.size(), s);
    gpu::f32_to_bf16(d_y.data(), d_x.data(), n, s);
    const std::vector<uint16_t> y = d_y.download(s);
    c.guards("bf16 out", d_y, s);
    // As floats (bf16 bits are the top half of one), so the NaN and bit-exact checks apply.
    std::vector<float> got(y.size()), want(y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      got[i] = bf16_to_f32(y[i]);
      want[i] = bf16_to_f32(ref[i]);
    }
    c.nan_agreement("bf16 out", got, want);
    for (size_t i = 0; i < got.size(); ++i)
      if (std::isnan(got[i]) && std::isnan(want[i])) got[i] = want[i] = 0.0f;
    c.bit_exact("bf16 out (non-NaN)", got, want);
  });
}

}  // namespace

void register_convert_cases(Registry& r) {
  add_case(r, 8, true);
  add_case(r, 100003, true);
  add_case(r, int64_t{1} << 22, false);
}

}  // namespace medtune::gpu_test
