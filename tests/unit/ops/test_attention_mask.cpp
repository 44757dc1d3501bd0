// The attention softmax's row maximum (ops/cpu/attention_mask.h row_max), 8 lanes at a time,
// against the serial loop it replaced: the same maximum (up to the sign of a zero one, which no
// subtraction can tell), NaN scores ignored, and with a key mask the hidden keys set to -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/attention_mask.h"

namespace medtune {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The loop softmax_visible_row ran before row_max: hidden keys to -inf, the maximum of the others.
float serial_max(std::vector<float>& row, const uint8_t* valid) {
  float mx = kNegInf;
  for (size_t c = 0; c < row.size(); ++c) {
    if (valid != nullptr && valid[c] == 0) {
      row[c] = kNegInf;
      continue;
    }
    mx = row[c] > mx ? row[c] : mx;
  }
  return mx;
}

TEST(AttentionRowMax, EqualsTheSerialLoopWithAndWithoutAKeyMask) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (const size_t n : {1u, 7u, 8u, 9u, 16u, 31u, 64u, 301u}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> row(n);
      std::vector<uint8_t> valid(n);
      for (size_t c = 0; c < n; ++c) {
        row[c] = normal(rng);
        valid[c] = rng() % 4 != 0 ? 1 : 0;
      }
      // Hidden keys may hold anything (a cache's unused rows): a huge score must not count.
      row[rng() % n] = 1e30f;
      if (trial % 3 == 0) row[rng() % n] = std::numeric_limits<float>::quiet_NaN();
      if (trial % 5 == 0) std::fill(valid.begin(), valid.end(), 0);  // no visible key
      for (const bool masked : {false, true}) {
        std::vector<float> want = row, got = row;
        const uint8_t* v = masked ? valid.data() : nullptr;
        const float want_max = serial_max(want, v);
        const float got_max = ops::detail::row_max(got.data(), static_cast<int64_t>(n), kNegInf, v);
        ASSERT_EQ(got_max, want_max) << "n " << n << " trial " << trial << " masked " << masked;
        for (size_t c = 0; c < n; ++c) {
          if (std::isnan(want[c])) {
            ASSERT_TRUE(std::isnan(got[c])) << "key " << c;
            continue;
          }
          ASSERT_EQ(got[c], want[c]) << "n " << n << " key " << c << " masked " << masked;
        }
      }
    }
  }
}

}  // namespace
}  // namespace medtune
