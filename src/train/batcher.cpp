#include "train/batcher.h"

#include <algorithm>

#include "core/error.h"

namespace medtune::train {

std::vector<std::vector<int64_t>> plan_epoch(const std::vector<int64_t>& lengths,
                                             const BatchPlanOptions& opt, int64_t epoch) {
  const auto n = static_cast<int64_t>(lengths.size());
  const int64_t mb = opt.micro_batch_size;
  if (mb <= 0) throw BadInput("micro_batch_size must be positive");
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(mix_seed(opt.seed, static_cast<uint64_t>(epoch)));
  fisher_yates(order, rng);
  if (opt.group_by_length) {
    const int64_t window = 50 * mb;
    for (int64_t w = 0; w < n; w += window) {
      auto first = order.begin() + w, last = order.begin() + std::min(n, w + window);
      std::stable_sort(first, last, [&](int64_t a, int64_t b) {
        const int64_t la = lengths[static_cast<size_t>(a)], lb = lengths[static_cast<size_t>(b)];
        return la != lb ? la > lb : a < b;
      });
    }
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t i = 0; i < n; i += mb)
    batches.emplace_back(order.begin() + i, order.begin() + std::min(n, i + mb));
  if (opt.group_by_length && batches.size() > 1) {
    // Shuffle whole batches, so the step order does not follow the length order of each window.
    std::vector<int64_t> perm(batches.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    fisher_yates(perm, rng);
    std::vector<std::vector<int64_t>> shuffled;
    shuffled.reserve(batches.size());
    for (int64_t p : perm) shuffled.push_back(std::move(batches[static_cast<size_t>(p)]));
    batches = std::move(shuffled);
  }
  return batches;
}

model::TrainBatch make_batch(const std::vector<Example>& examples,
                             const std::vector<int64_t>& indices, bool train_on_inputs,
                             int32_t pad_id) {
  model::TrainBatch b;
  b.B = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) b.T = std::max(b.T, examples.at(static_cast<size_t>(i)).length() - 1);
  if (b.B == 0 || b.T <= 0) throw Internal("make_batch: empty batch");
  const auto BT = static_cast<size_t>(b.B * b.T);
  b.ids.assign(BT, pad_id < 0 ? 0 : pad_id);  // padding ids are never attended to nor targets
  b.mask.assign(BT, 0);
  b.targets.assign(BT, -100);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& ex = examples[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    std::vector<int32_t> tokens(ex.context);
    tokens.insert(tokens.end(), ex.answer.begin(), ex.answer.end());
    const auto nctx = static_cast<int64_t>(ex.context.size());
    const int64_t n = static_cast<int64_t>(tokens.size()) - 1;  // inputs of this row
    for (int64_t t = 0; t < n; ++t) {
      const auto k = static_cast<size_t>(r * b.T + t);
      b.ids[k] = tokens[static_cast<size_t>(t)];
      b.mask[k] = 1;
      // targets[t] is token t + 1: a target when it is an answer token (index >= nctx).
      if (train_on_inputs || t + 1 >= nctx) b.targets[k] = tokens[static_cast<size_t>(t + 1)];
    }
  }
  return b;
}

int64_t count_targets(const model::TrainBatch& b) {
  return static_cast<int64_t>(std::count_if(b.targets.begin(), b.targets.end(), [](int64_t t) { return t != -100; }));
}

}  // namespace medtune::train
