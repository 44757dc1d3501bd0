#include <cmath>

#include "ops/ops.h"

namespace medtune::ops {

LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V) {
  LossSum total;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const float* row = logits + n * V;
    // log-sum-exp in double: the loss is compared against an fp64 reference to ~1e-6.
    double mx = row[0];
    for (int64_t v = 1; v < V; ++v) mx = std::fmax(mx, static_cast<double>(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    total.sum += mx + std::log(sum) - static_cast<double>(row[targets[n]]);
    total.count += 1;
  }
  return total;
}

}  // namespace medtune::ops
