// Examples -> TrainBatches: the per-epoch order, grouping into micro-batches, and the padded
// (B, T) layout forward_backward takes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/train_step.h"
#include "train/data.h"

namespace medtune::train {

struct BatchPlanOptions {
  int64_t micro_batch_size = 1;
  bool group_by_length = false;
  uint64_t seed = 42;
};

// The micro-batches of epoch `epoch` (0-based) as lists of example indices. The examples are
// shuffled with fisher_yates(mix_seed(seed, epoch)); with group_by_length, windows of
// 50 * micro_batch_size shuffled examples are sorted by length (longest first, ties by index)
// before cutting into batches, and the batches are then shuffled again, so that padding is small
// but the order still varies. The last batch may be smaller (transformers keeps it too).
std::vector<std::vector<int64_t>> plan_epoch(const std::vector<int64_t>& lengths,
                                             const BatchPlanOptions& opt, int64_t epoch);

// Right-padded batch of the listed examples: T = the longest (context + answer) - 1 in the
// batch. ids[t] = token t, targets[t] = token t + 1 where that token is a target (an answer token;
// with train_on_inputs also a context token) else -100; padding: id pad_id, mask 0, target -100.
model::TrainBatch make_batch(const std::vector<Example>& examples,
                             const std::vector<int64_t>& indices, bool train_on_inputs,
                             int32_t pad_id);

// Target tokens of a batch (targets != -100): the loss normaliser of gradient accumulation.
int64_t count_targets(const model::TrainBatch& b);

}  // namespace medtune::train
