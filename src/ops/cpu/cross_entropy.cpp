#include <cmath>
#include <vector>

#include "ops/cpu/row_loss.h"
#include "ops/ops.h"

namespace medtune::ops {

LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V) {
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);  // (N), 0 for ignored rows
  // Rows in parallel; the losses are added in row order below, whatever the thread count.
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const float* row = logits + n * V;
    // log-sum-exp in double: the loss is compared against an fp64 reference to ~1e-6.
    double mx = row[0];
    for (int64_t v = 1; v < V; ++v) mx = std::fmax(mx, static_cast<double>(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    row_loss[static_cast<size_t>(n)] = mx + std::log(sum) - static_cast<double>(row[targets[n]]);
  }
  return detail::sum_target_rows(row_loss, targets, N);
}

}  // namespace medtune::ops
