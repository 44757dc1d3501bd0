// Examples -> TrainBatches: the per-epoch order, grouping into micro-batches, and the padded
// (B, T) layout forward_backward takes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/train_step.h"
#include "train/data.h"
#include "train/train_config.h"

namespace medtune::train {

struct BatchPlanOptions {
  int64_t micro_batch_size = 1;
  bool group_by_length = false;  // ignored with sample_packing
  uint64_t seed = 42;
  // Sequence packing: a micro-batch is micro_batch_size rows of up to sequence_len input tokens,
  // each holding several examples (see plan_epoch).
  bool sample_packing = false;
  int64_t sequence_len = 0;
};

// Each example's length in tokens (context + answer): what the planners take.
std::vector<int64_t> example_lengths(const std::vector<Example>& examples);

// The options a config implies (micro_batch_size, group_by_length, seed, sample_packing, sequence_len).
BatchPlanOptions batch_plan_options(const TrainConfig& cfg);

// The micro-batches of epoch `epoch` (0-based) as lists of example indices. The examples are
// shuffled with fisher_yates(mix_seed(seed, epoch)); with group_by_length, windows of
// 50 * micro_batch_size shuffled examples are sorted by length (longest first, ties by index)
// before cutting into batches, and the batches are then shuffled again, so that padding is small
// but the order still varies. The last batch may be smaller (transformers keeps it too).
//
// With sample_packing, rows are packed by first-fit decreasing (FFD): the epoch's examples,
// shuffled as above, are sorted by input tokens (length - 1; longest first, ties in shuffled
// order) and each goes into the first row with room for it (rows of sequence_len input tokens).
// The rows are then shuffled with the same generator and cut into micro-batches of
// micro_batch_size rows. A micro-batch lists its examples row after row, its rows in FFD order,
// so that filling rows of sequence_len in list order (an example that does not fit starts the
// next row: make_batch with pack_len) gives back exactly those rows: an example of a later FFD
// row did not fit into any earlier row when it was placed, and rows only fill up afterwards.
// FFD rather than axolotl's multipack sampler (also first-fit decreasing, over groups, with a
// distributed-training balancing step): deterministic, simple, within 11/9 of the fewest rows.
std::vector<std::vector<int64_t>> plan_epoch(const std::vector<int64_t>& lengths,
                                             const BatchPlanOptions& opt, int64_t epoch);

// Micro-batches in every epoch's plan: ceil(examples / micro_batch_size), or with packing
// ceil(packed rows / micro_batch_size). The packed row count is the same in every epoch: FFD's
// rows depend on the sorted lengths only (the shuffle reorders examples of equal length).
int64_t micro_batches_per_epoch(const std::vector<int64_t>& lengths, const BatchPlanOptions& opt);

// Right-padded batch of the listed examples: T = the longest (context + answer) - 1 in the
// batch. ids[t] = token t, targets[t] = token t + 1 where that token is a target (an answer token;
// with train_on_inputs also a context token) else -100; padding: id pad_id, mask 0, target -100.
// pack_len > 0 (sample_packing): the examples fill rows of up to pack_len input tokens in list
// order, a new row when the next does not fit (plan_epoch's layout); each example keeps exactly
// the ids and targets it has alone, its positions restart at 0 (TrainBatch::positions), and
// T = the fullest row. A row's trailing padding is a segment of its own (never a target).
model::TrainBatch make_batch(const std::vector<Example>& examples,
                             const std::vector<int64_t>& indices, bool train_on_inputs,
                             int32_t pad_id, int64_t pack_len = 0);

// Target tokens of a batch (targets != -100): the loss normaliser of gradient accumulation.
int64_t count_targets(const model::TrainBatch& b);

}  // namespace medtune::train
