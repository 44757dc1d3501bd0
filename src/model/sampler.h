// Next-token choice from logits: greedy, or sampled with temperature, top-k and top-p, after
// OpenAI's logit bias and presence/frequency penalties.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace medtune::model {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int64_t top_k = 0;         // 0 = no limit
  float top_p = 1.0f;        // nucleus: smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  // OpenAI's penalties, on the tokens this sampler has returned so far (the generated ones, not
  // the prompt's, as OpenAI and vLLM count them): token j's logit loses
  // frequency_penalty * count(j) + presence_penalty * (count(j) > 0) before the choice.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token id, bias) added to those tokens' logits before the choice (OpenAI's logit_bias; -100
  // bans a token in practice, +100 forces it). Ids are distinct and within the vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // logits: (V), the model's. Ties in greedy mode go to the lowest id, as torch.argmax does.
  // With a bias or a penalty the choice is made on adjusted logits,
  //   l'[j] = float(double(l[j]) + (bias[j] - (frequency_penalty * count[j] + presence_penalty)))
  // in double (the penalty term only for tokens returned before), in a copy: `logits` is never
  // changed, so the log-probabilities a server reports stay the model's own (vLLM's default).
  int32_t next(const float* logits, int64_t V);

 private:
  bool adjusts() const;
  const float* adjusted(const float* logits, int64_t V);  // adjusted_, filled
  int32_t choose(const float* logits, int64_t V);         // greedy or sampled, as configured

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int64_t> counts_;  // tokens returned so far (with penalties only)
  std::vector<float> adjusted_;                  // (V) the adjusted copy
};

int32_t argmax(const float* x, int64_t n);

}  // namespace medtune::model
