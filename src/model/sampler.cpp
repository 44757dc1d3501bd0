#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"

namespace medtune::model {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

bool Sampler::adjusts() const {
  return !p_.logit_bias.empty() || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
}

const float* Sampler::adjusted(const float* logits, int64_t V) {
  // Each adjusted token's change in double (bias minus penalty), added to its logit and rounded
  // to float once.
  std::unordered_map<int32_t, double> delta;
  for (const auto& [id, bias] : p_.logit_bias) delta[id] += static_cast<double>(bias);
  for (const auto& [id, count] : counts_)
    delta[id] -= static_cast<double>(p_.frequency_penalty) * static_cast<double>(count) +
                 static_cast<double>(p_.presence_penalty);
  adjusted_.assign(logits, logits + V);
  for (const auto& [id, d] : delta) {
    if (id < 0 || id >= V)
      throw Internal("Sampler: logit_bias token id " + std::to_string(id) +
                     " is outside the vocabulary of " + std::to_string(V));
    adjusted_[static_cast<size_t>(id)] = static_cast<float>(static_cast<double>(logits[id]) + d);
  }
  return adjusted_.data();
}

int32_t Sampler::next(const float* model_logits, int64_t V) {
  const bool adjust = adjusts();
  const float* logits = adjust ? adjusted(model_logits, V) : model_logits;
  const int32_t id = choose(logits, V);
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) ++counts_[id];
  return id;
}

int32_t Sampler::choose(const float* logits, int64_t V) {
  if (p_.temperature <= 0.0f) return argmax(logits, V);
  // Candidates sorted by logit, descending; top-k then top-p keep a prefix of them.
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t k = (p_.top_k > 0 && p_.top_k < V) ? static_cast<size_t>(p_.top_k) : idx.size();
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  idx.resize(k);
  std::vector<double> prob(k);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    prob[i] = std::exp((static_cast<double>(logits[idx[i]]) - mx) / static_cast<double>(p_.temperature));
    sum += prob[i];
  }
  size_t keep = k;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += prob[i] / sum;
      if (cum >= static_cast<double>(p_.top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace medtune::model
