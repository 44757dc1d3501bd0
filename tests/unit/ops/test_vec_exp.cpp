// The vector exp of the softmaxes and SiLU (ops/cpu/vec_exp.h) against std::exp in double:
// <= 2 ulp over the range that matters, and std::exp's special cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/vec_exp.h"

namespace medtune {
namespace {

using ops::detail::exp1;

// |got - exact| in units of the last place of the exact value (as float).
double ulps(float got, double exact) {
  const float e = static_cast<float>(exact);
  const double ulp = static_cast<double>(std::nextafter(e, std::numeric_limits<float>::infinity()) - e);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(VecExp, WithinTwoUlpOverTheNormalRange) {
  double worst = 0;
  for (double x = -86.0; x <= 88.0; x += 0.000731) {
    const float xf = static_cast<float>(x);
    worst = std::fmax(worst, ulps(exp1(xf), std::exp(static_cast<double>(xf))));
  }
  EXPECT_LE(worst, 2.0);
}

TEST(VecExp, SpecialValuesAsStdExp) {
  EXPECT_EQ(exp1(0.0f), 1.0f);
  EXPECT_EQ(exp1(-std::numeric_limits<float>::infinity()), 0.0f);  // masked scores
  EXPECT_EQ(exp1(-100.0f), 0.0f);
  EXPECT_EQ(exp1(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp1(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(exp1(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isfinite(exp1(88.72f)));
}

// The array helpers give each element the same bits as exp1, wherever it sits (vector body or
// scalar tail), and their sums add those values.
TEST(VecExp, ArrayHelpersMatchTheScalarKernel) {
  std::vector<float> z(37);
  for (size_t i = 0; i < z.size(); ++i) z[i] = -20.0f + 1.3f * static_cast<float>(i);
  z[5] = -std::numeric_limits<float>::infinity();
  const float shift = 7.5f;
  std::vector<float> row = z;
  const float sum = ops::detail::exp_shifted_sum(row.data(), static_cast<int64_t>(row.size()), shift);
  std::vector<float> out(z.size());
  const double sum64 = ops::detail::exp_shifted_sum_f64(out.data(), z.data(), static_cast<int64_t>(z.size()), shift);
  std::vector<float> neg(z.size());
  ops::detail::exp_neg(neg.data(), z.data(), static_cast<int64_t>(z.size()));
  double expect = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const float e = exp1(z[i] - shift);
    EXPECT_EQ(row[i], e) << i;
    EXPECT_EQ(out[i], e) << i;
    EXPECT_EQ(neg[i], exp1(-z[i])) << i;
    expect += static_cast<double>(e);
  }
  EXPECT_NEAR(sum64, expect, 1e-12 * expect);
  EXPECT_NEAR(static_cast<double>(sum), expect, 1e-6 * expect);
}

}  // namespace
}  // namespace medtune
