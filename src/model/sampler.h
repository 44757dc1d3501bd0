// Next-token choice from logits: greedy, or sampled with temperature, top-k and top-p.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace medtune::model {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int64_t top_k = 0;         // 0 = no limit
  float top_p = 1.0f;        // nucleus: smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // logits: (V). Ties in greedy mode go to the lowest id, as torch.argmax does.
  int32_t next(const float* logits, int64_t V);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace medtune::model
