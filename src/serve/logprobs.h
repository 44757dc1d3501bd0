// Log-probabilities from logits: log_softmax computed in double (the normaliser sums V ~ 50k
// exponentials; in float its rounding would reach ~1e-5 relative), and the k most likely tokens.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace medtune::serve {

// log(sum_v exp(logits[v])), stable (max subtracted first). logits: (V).
double log_sum_exp(const float* logits, int64_t V);

// The k ids of largest logit, largest first, ties to the lower id (as torch.topk/argmax), with
// their log-probabilities logits[id] - lse.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t V, int64_t k, double lse);

}  // namespace medtune::serve
