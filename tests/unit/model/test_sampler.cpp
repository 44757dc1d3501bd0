// model::Sampler: greedy ties, OpenAI's logit_bias and presence/frequency penalties (on the tokens
// the sampler returned, never on the caller's logits). The expected sequences are worked out by
// hand in the comments, from OpenAI's formula
//   l'[j] = l[j] + bias[j] - frequency_penalty * count[j] - presence_penalty * (count[j] > 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/sampler.h"

using namespace medtune;

namespace {

// The same logits at every step: what changes the choice is the sampler's own history.
std::vector<int32_t> run(const model::SamplingParams& p, const std::vector<float>& logits,
                         int steps) {
  model::Sampler s(p);
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i)
    out.push_back(s.next(logits.data(), static_cast<int64_t>(logits.size())));
  return out;
}

const std::vector<float> kLogits{2.0f, 1.9f, 1.0f, 0.5f};

}  // namespace

TEST(Sampler, GreedyTakesTheLowestIdOfATie) {
  const std::vector<float> l{0.5f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(run({}, l, 3), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Sampler, LogitBiasMovesTheGreedyChoice) {
  model::SamplingParams p;
  p.logit_bias = {{3, 1.6f}};  // 0.5 + 1.6 = 2.1 > 2.0
  EXPECT_EQ(run(p, kLogits, 2), (std::vector<int32_t>{3, 3}));
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};  // the two best banned: 2 (1.0) next
  EXPECT_EQ(run(p, kLogits, 2), (std::vector<int32_t>{2, 2}));
}

TEST(Sampler, FrequencyPenaltyGrowsWithEachReturn) {
  model::SamplingParams p;
  p.frequency_penalty = 0.3f;
  // 0 (2.0); then 0 at 1.7 < 1.9: 1; 0 at 1.7 > 1.6: 0; 1.4 < 1.6: 1; 1.4 > 1.3: 0.
  EXPECT_EQ(run(p, kLogits, 5), (std::vector<int32_t>{0, 1, 0, 1, 0}));
}

TEST(Sampler, PresencePenaltyIsPaidOnce) {
  model::SamplingParams p;
  p.presence_penalty = 1.5f;
  // 0 (2.0); 0 at 0.5: 1 (1.9); 1 at 0.4: 2 (1.0); 2 at -0.5: 0 and 3 tie at 0.5, the lower id;
  // 0 again: still 0.5 (presence, not frequency), the tie with 3 again.
  EXPECT_EQ(run(p, kLogits, 5), (std::vector<int32_t>{0, 1, 2, 0, 0}));
}

TEST(Sampler, NegativePenaltiesFavourRepeats) {
  // Sampling from 4 equal logits: with presence_penalty -20 the first token drawn leads the
  // others by 20 from then on (e^-20 each), so every later draw repeats it; without, they vary.
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  const std::vector<float> l(4, 0.0f);
  const std::vector<int32_t> free = run(p, l, 50);
  EXPECT_NE(std::count(free.begin(), free.end(), free[0]), 50);
  p.presence_penalty = -20.0f;
  const std::vector<int32_t> held = run(p, l, 50);
  EXPECT_EQ(std::count(held.begin(), held.end(), held[0]), 50);
}

TEST(Sampler, TheCallersLogitsAreNeverChanged) {
  model::SamplingParams p;
  p.frequency_penalty = 2.0f;
  p.logit_bias = {{2, 5.0f}};
  std::vector<float> l = kLogits;
  model::Sampler s(p);
  for (int i = 0; i < 4; ++i) s.next(l.data(), static_cast<int64_t>(l.size()));
  EXPECT_EQ(l, kLogits);
}

TEST(Sampler, BiasBansAndForcesWhenSampling) {
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  const std::vector<float> l{3.0f, 2.9f, 2.8f, -4.0f};
  p.logit_bias = {{0, -100.0f}};
  for (int32_t id : run(p, l, 300)) EXPECT_NE(id, 0);
  p.logit_bias = {{3, 100.0f}};
  for (int32_t id : run(p, l, 300)) EXPECT_EQ(id, 3);
  // Without a bias the same seed draws token 0 often (e^3 / (e^3 + e^2.9 + e^2.8) ~ 0.37).
  p.logit_bias.clear();
  int zeros = 0;
  for (int32_t id : run(p, l, 300)) zeros += id == 0;
  EXPECT_GT(zeros, 60);
}

TEST(Sampler, FrequencyPenaltySpreadsSampledTokens) {
  // A low temperature and a strong frequency penalty: a drawn token's logit drops by 2, a factor
  // of e^-40 at this temperature, so 4 draws from 4 near-equal tokens take each once.
  model::SamplingParams p;
  p.temperature = 0.05f;
  p.seed = 7;
  p.frequency_penalty = 2.0f;
  const std::vector<float> l{1.0f, 1.01f, 0.99f, 1.02f};
  std::vector<int> count(4, 0);
  for (int32_t id : run(p, l, 4)) ++count[static_cast<size_t>(id)];
  EXPECT_EQ(count, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Sampler, ABiasOutsideTheVocabularyIsAnInternalError) {
  model::SamplingParams p;
  p.logit_bias = {{4, 1.0f}};
  model::Sampler s(p);
  EXPECT_THROW(s.next(kLogits.data(), 4), Internal);
}

TEST(Sampler, TopKAndTopPKeepTheMostLikelyPrefix) {
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  const std::vector<float> l{0.0f, 1.0f, 0.5f, 0.9f, -1.0f};  // ranked 1, 3, 2, 0, 4
  p.top_k = 1;
  for (int32_t id : run(p, l, 200)) EXPECT_EQ(id, 1);
  p.top_k = 2;
  std::vector<int> seen(5, 0);
  for (int32_t id : run(p, l, 400)) ++seen[static_cast<size_t>(id)];
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_EQ(seen[0] + seen[2] + seen[4], 0);
  // Probabilities e^l / sum: 0.122, 0.332, 0.201, 0.300, 0.045. top_p 0.6 keeps 1 and 3 (0.632),
  // top_p 0.3 keeps 1 alone (0.332 reaches it).
  p.top_k = 0;
  p.top_p = 0.6f;
  seen.assign(5, 0);
  for (int32_t id : run(p, l, 400)) ++seen[static_cast<size_t>(id)];
  EXPECT_EQ(seen[0] + seen[2] + seen[4], 0);
  EXPECT_GT(seen[1] * seen[3], 0);
  p.top_p = 0.3f;
  for (int32_t id : run(p, l, 200)) EXPECT_EQ(id, 1);
}

TEST(Sampler, DrawsFollowTheSoftmaxAtTheTemperature) {
  // 20000 draws at temperature 0.5 from logits (0, 0.5, 1): p = softmax(2 l) = 0.090, 0.245,
  // 0.665. Each frequency's standard deviation is at most sqrt(0.25 / 20000) = 0.0035; 5 of them
  // is the bound (the seed is fixed, so the test is deterministic; the bound is how far a correct
  // sampler's frequencies stray for about one seed in two million, per token).
  model::SamplingParams p;
  p.temperature = 0.5f;
  p.seed = 2024;
  const std::vector<float> l{0.0f, 0.5f, 1.0f};
  const int n = 20000;
  std::vector<int> seen(3, 0);
  for (int32_t id : run(p, l, n)) ++seen[static_cast<size_t>(id)];
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  const double want[3] = {1.0 / z, std::exp(1.0) / z, std::exp(2.0) / z};
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(static_cast<double>(seen[static_cast<size_t>(i)]) / n, want[i], 5 * 0.0035) << "token " << i;
}
