// log_softmax and top-k against a plain double-precision reference computed here, on sizes and
// values that matter: a vocabulary-sized row, large logits (overflow without the max shift), ties.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "serve/logprobs.h"

namespace medtune::serve {
namespace {

TEST(Logprobs, MatchesTheDefinitionInDouble) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 4.f);
  std::vector<float> x(49152);  // SmolLM2's vocabulary
  for (float& v : x) v = d(rng);
  x[123] = 30.f;
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  const double ref = std::log(sum);
  const double lse = log_sum_exp(x.data(), static_cast<int64_t>(x.size()));
  // Both in double over the same floats: only summation order differs (~1e-16 relative per term).
  EXPECT_NEAR(lse, ref, 1e-12 * std::abs(ref));
  const auto top = top_logprobs(x.data(), static_cast<int64_t>(x.size()), 3, lse);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 123);
  EXPECT_FLOAT_EQ(top[0].second, static_cast<float>(30.0 - ref));
  EXPECT_GE(top[0].second, top[1].second);
  EXPECT_GE(top[1].second, top[2].second);
}

TEST(Logprobs, LargeLogitsDoNotOverflow) {
  const std::vector<float> x = {1000.f, 1000.f, 0.f};
  const double lse = log_sum_exp(x.data(), 3);
  EXPECT_NEAR(lse, 1000.0 + std::log(2.0 + std::exp(-1000.0)), 1e-12);
  // A tie goes to the lower id, as torch.topk / argmax.
  const auto top = top_logprobs(x.data(), 3, 2, lse);
  EXPECT_EQ(top[0].first, 0);
  EXPECT_EQ(top[1].first, 1);
  EXPECT_NEAR(top[0].second, -std::log(2.0), 1e-7);
}

TEST(Logprobs, KIsClampedToTheVocabulary) {
  const std::vector<float> x = {1.f, 2.f};
  EXPECT_EQ(top_logprobs(x.data(), 2, 5, log_sum_exp(x.data(), 2)).size(), 2u);
  EXPECT_TRUE(top_logprobs(x.data(), 2, 0, 0.0).empty());
}

}  // namespace
}  // namespace medtune::serve
