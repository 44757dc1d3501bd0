#include "serve/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace medtune::serve {

double log_sum_exp(const float* logits, int64_t V) {
  float mx = logits[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v]) - static_cast<double>(mx));
  return static_cast<double>(mx) + std::log(sum);
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t V, int64_t k, double lse) {
  k = std::clamp<int64_t>(k, 0, V);
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    out.emplace_back(idx[static_cast<size_t>(i)], static_cast<float>(static_cast<double>(logits[idx[static_cast<size_t>(i)]]) - lse));
  return out;
}

}  // namespace medtune::serve
