// The total of per-row losses computed in parallel, added in row order (so the sum does not
// depend on the thread count) over the rows that have a target. Internal to src/ops/cpu.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace medtune::ops::detail {

inline LossSum sum_target_rows(const std::vector<double>& row_loss, const int64_t* targets, int64_t N) {
  LossSum total;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    total.sum += row_loss[static_cast<size_t>(n)];
    total.count += 1;
  }
  return total;
}

}  // namespace medtune::ops::detail
