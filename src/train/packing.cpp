#include "train/packing.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace medtune::train {

std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& sizes,
                                                       std::vector<int64_t> order, int64_t capacity) {
  for (int64_t i : order) {
    const int64_t sz = sizes.at(static_cast<size_t>(i));
    if (sz < 0 || sz > capacity)
      throw Internal("first_fit_decreasing: item " + std::to_string(i) + " has size " + std::to_string(sz) +
                     ", outside [0, " + std::to_string(capacity) + "]");
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sizes[static_cast<size_t>(a)] > sizes[static_cast<size_t>(b)];
  });
  // free_[node]: the most free space of any bin under node, over n leaves (bins that do not exist
  // yet are empty, so the opened bins are always a prefix of the leaves).
  const auto n = static_cast<int64_t>(order.size());
  int64_t leaves = 1;
  while (leaves < std::max<int64_t>(n, 1)) leaves *= 2;
  std::vector<int64_t> free_(static_cast<size_t>(2 * leaves), capacity);
  std::vector<std::vector<int64_t>> bins;
  for (int64_t item : order) {
    const int64_t sz = sizes[static_cast<size_t>(item)];
    int64_t node = 1;  // the root holds a fitting bin: there are n leaves and at most n - 1 are used
    while (node < leaves) node = free_[static_cast<size_t>(2 * node)] >= sz ? 2 * node : 2 * node + 1;
    const int64_t bin = node - leaves;
    if (bin == static_cast<int64_t>(bins.size())) bins.emplace_back();
    bins[static_cast<size_t>(bin)].push_back(item);
    free_[static_cast<size_t>(node)] -= sz;
    for (node /= 2; node >= 1; node /= 2)
      free_[static_cast<size_t>(node)] =
          std::max(free_[static_cast<size_t>(2 * node)], free_[static_cast<size_t>(2 * node + 1)]);
  }
  return bins;
}

std::vector<std::vector<int64_t>> next_fit(const std::vector<int64_t>& sizes, int64_t capacity) {
  std::vector<std::vector<int64_t>> bins;
  int64_t used = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || sizes[i] > capacity)
      throw Internal("next_fit: item " + std::to_string(i) + " has size " + std::to_string(sizes[i]) +
                     ", outside [0, " + std::to_string(capacity) + "]");
    if (bins.empty() || used + sizes[i] > capacity) {
      bins.emplace_back();
      used = 0;
    }
    bins.back().push_back(static_cast<int64_t>(i));
    used += sizes[i];
  }
  return bins;
}

}  // namespace medtune::train
