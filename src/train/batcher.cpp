#include "train/batcher.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "train/packing.h"

namespace medtune::train {

namespace {

// Input tokens of each example (the last token is only a target), the size packing works with.
std::vector<int64_t> input_sizes(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> sizes(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) sizes[i] = std::max<int64_t>(lengths[i] - 1, 0);
  return sizes;
}

void check_packing(const BatchPlanOptions& opt) {
  if (opt.sequence_len <= 0)
    throw Internal("sample_packing needs sequence_len > 0, got " + std::to_string(opt.sequence_len));
}

// plan_epoch with sample_packing: FFD rows of the shuffled order, rows shuffled, cut into
// micro-batches that list their examples row after row in FFD order (see batcher.h).
std::vector<std::vector<int64_t>> plan_packed(const std::vector<int64_t>& lengths, std::vector<int64_t> order,
                                              const BatchPlanOptions& opt, std::mt19937_64& rng) {
  check_packing(opt);
  const auto rows = first_fit_decreasing(input_sizes(lengths), std::move(order), opt.sequence_len);
  std::vector<int64_t> perm(rows.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  fisher_yates(perm, rng);
  std::vector<std::vector<int64_t>> batches;
  const auto mb = static_cast<size_t>(opt.micro_batch_size);
  for (size_t i = 0; i < perm.size(); i += mb) {
    std::vector<int64_t> chosen(perm.begin() + static_cast<std::ptrdiff_t>(i),
                                perm.begin() + static_cast<std::ptrdiff_t>(std::min(perm.size(), i + mb)));
    std::sort(chosen.begin(), chosen.end());  // FFD order within the micro-batch: next fit recovers the rows
    std::vector<int64_t> batch;
    for (int64_t r : chosen) batch.insert(batch.end(), rows[static_cast<size_t>(r)].begin(), rows[static_cast<size_t>(r)].end());
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace

std::vector<int64_t> example_lengths(const std::vector<Example>& examples) {
  std::vector<int64_t> lengths;
  lengths.reserve(examples.size());
  for (const auto& ex : examples) lengths.push_back(ex.length());
  return lengths;
}

BatchPlanOptions batch_plan_options(const TrainConfig& cfg) {
  BatchPlanOptions o;
  o.micro_batch_size = cfg.micro_batch_size;
  o.group_by_length = cfg.group_by_length;
  o.seed = static_cast<uint64_t>(cfg.seed);
  o.sample_packing = cfg.sample_packing;
  o.sequence_len = cfg.sequence_len;
  return o;
}

std::vector<std::vector<int64_t>> plan_epoch(const std::vector<int64_t>& lengths,
                                             const BatchPlanOptions& opt, int64_t epoch) {
  const auto n = static_cast<int64_t>(lengths.size());
  const int64_t mb = opt.micro_batch_size;
  if (mb <= 0) throw BadInput("micro_batch_size must be positive");
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(mix_seed(opt.seed, static_cast<uint64_t>(epoch)));
  fisher_yates(order, rng);
  if (opt.sample_packing) return plan_packed(lengths, std::move(order), opt, rng);
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

int64_t micro_batches_per_epoch(const std::vector<int64_t>& lengths, const BatchPlanOptions& opt) {
  const int64_t mb = opt.micro_batch_size;
  if (mb <= 0) throw BadInput("micro_batch_size must be positive");
  int64_t units = static_cast<int64_t>(lengths.size());
  if (opt.sample_packing) {
    check_packing(opt);
    std::vector<int64_t> order(lengths.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    units = static_cast<int64_t>(first_fit_decreasing(input_sizes(lengths), std::move(order), opt.sequence_len).size());
  }
  return (units + mb - 1) / mb;
}

namespace {

// Writes one example's length - 1 inputs from flat index `at` on: ids[t] = token t, mask 1,
// targets[t] = token t + 1 where that token is a target (an answer token, index >= context size,
// that the answer_mask trains; without an answer_mask train_on_inputs makes every token one).
void place_example(model::TrainBatch& b, size_t at, const Example& ex, bool train_on_inputs) {
  std::vector<int32_t> tokens(ex.context);
  tokens.insert(tokens.end(), ex.answer.begin(), ex.answer.end());
  const auto nctx = static_cast<int64_t>(ex.context.size());
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  // The axolotl types applied train_on_inputs when they built the mask (data.h: Example).
  const bool all_inputs = train_on_inputs && ex.answer_mask.empty();
  for (int64_t t = 0; t < n; ++t) {
    const size_t k = at + static_cast<size_t>(t);
    b.ids[k] = tokens[static_cast<size_t>(t)];
    b.mask[k] = 1;
    const bool target = all_inputs || (t + 1 >= nctx && ex.answer_trained(static_cast<size_t>(t + 1 - nctx)));
    if (target) b.targets[k] = tokens[static_cast<size_t>(t + 1)];
  }
}

// The packed layout: rows filled in list order (next fit), each example placed exactly as
// make_batch places it alone, positions restarting at 0 per example and for the padding.
model::TrainBatch make_packed_batch(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                                    bool train_on_inputs, int32_t pad_id, int64_t pack_len) {
  std::vector<int64_t> sizes;
  for (int64_t i : indices) sizes.push_back(std::max<int64_t>(examples.at(static_cast<size_t>(i)).length() - 1, 0));
  const auto rows = next_fit(sizes, pack_len);
  model::TrainBatch b;
  b.B = static_cast<int64_t>(rows.size());
  for (const auto& row : rows) {
    int64_t used = 0;
    for (int64_t k : row) used += sizes[static_cast<size_t>(k)];
    b.T = std::max(b.T, used);
  }
  if (b.B == 0 || b.T <= 0) throw Internal("make_batch: empty batch");
  const auto BT = static_cast<size_t>(b.B * b.T);
  b.ids.assign(BT, pad_id < 0 ? 0 : pad_id);
  b.mask.assign(BT, 0);
  b.targets.assign(BT, -100);
  b.positions.assign(BT, 0);
  for (int64_t r = 0; r < b.B; ++r) {
    int64_t t0 = 0;  // where the next example starts in row r
    for (int64_t k : rows[static_cast<size_t>(r)]) {
      const int64_t n = sizes[static_cast<size_t>(k)];
      place_example(b, static_cast<size_t>(r * b.T + t0),
                    examples[static_cast<size_t>(indices[static_cast<size_t>(k)])], train_on_inputs);
      for (int64_t t = 0; t < n; ++t) b.positions[static_cast<size_t>(r * b.T + t0 + t)] = t;
      t0 += n;
    }
    for (int64_t t = t0; t < b.T; ++t) b.positions[static_cast<size_t>(r * b.T + t)] = t - t0;
  }
  return b;
}

}  // namespace

model::TrainBatch make_batch(const std::vector<Example>& examples,
                             const std::vector<int64_t>& indices, bool train_on_inputs,
                             int32_t pad_id, int64_t pack_len) {
  if (pack_len > 0) return make_packed_batch(examples, indices, train_on_inputs, pad_id, pack_len);
  model::TrainBatch b;
  b.B = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) b.T = std::max(b.T, examples.at(static_cast<size_t>(i)).length() - 1);
  if (b.B == 0 || b.T <= 0) throw Internal("make_batch: empty batch");
  const auto BT = static_cast<size_t>(b.B * b.T);
  b.ids.assign(BT, pad_id < 0 ? 0 : pad_id);  // padding ids are never attended to nor targets
  b.mask.assign(BT, 0);
  b.targets.assign(BT, -100);
  for (int64_t r = 0; r < b.B; ++r)
    place_example(b, static_cast<size_t>(r * b.T), examples[static_cast<size_t>(indices[static_cast<size_t>(r)])],
                  train_on_inputs);
  return b;
}

int64_t count_targets(const model::TrainBatch& b) {
  return static_cast<int64_t>(std::count_if(b.targets.begin(), b.targets.end(), [](int64_t t) { return t != -100; }));
}

}  // namespace medtune::train
