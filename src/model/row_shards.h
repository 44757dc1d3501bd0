// Row shards: forward_backward (train_step.h) splits a batch's rows over the threads, each shard
// a whole single-threaded forward + backward pass, instead of running every op of one pass on
// all threads. Independent passes never wait at a barrier and run each GEMM on one core; on the
// 2-core machines of BENCHMARKS.md a step takes ~15% less wall time than with every op split.
//
// Cost: each shard but the first accumulates its LoRA gradients into a copy of the adapter
// (A, B, dA, dB), summed into the adapter in shard order afterwards (deterministic for a given
// shard count; a different count changes the sums' order, i.e. fp32 rounding, like resuming a
// run on another thread count already does). Automatic sharding is used only when those copies
// are small next to the batch's activations.
#pragma once

#include <cstdint>

#include "model/train_step.h"

namespace medtune::model {

// Bytes of the activations forward_backward keeps for a batch of N tokens (layer.h LayerActs
// per layer, or with checkpointing each layer's input plus one layer recomputed), keys and
// values excluded. Shared with `medtune train --dry-run`'s memory plan.
double planned_activation_bytes(const ModelConfig& c, const LoraWeights& lora, int64_t N,
                                bool gradient_checkpointing);

// What a training pass of N tokens holds besides those activations and the keys and values
// (model/train_step.cpp, layer.cpp, lora_linear.cpp), in bytes: `held` through the whole pass
// (the residual stream and its gradient, the RoPE tables and key mask, the LoRA groups'
// scratch, which dropout does without), and one layer's forward and backward temporaries (`layer`, with `dropout` the
// dropped input, with `qk_rows_permuted` (a GGUF checkpoint) the q and k gradients in its row
// order), kept from one layer to the next and freed before the loss head.
struct PassScratch {
  double held = 0, layer = 0;
};
PassScratch planned_pass_scratch(const ModelConfig& c, const LoraWeights& lora, int64_t N,
                                 bool dropout, bool qk_rows_permuted);

// Bytes of one shard's adapter copy (parameters and gradients).
double shard_copy_bytes(const LoraWeights& lora);

// Shards for a batch of B rows: opt.row_shards when set (at most B), else one per thread when
// there are at least as many rows as threads and the extra shards' adapter copies cost at most
// a quarter of the activations (as without checkpointing, so that checkpointing does not change
// the count), else 1.
int64_t row_shards_for(const ModelConfig& c, const LoraWeights& lora, int64_t B, int64_t T,
                       const TrainOptions& opt, int threads);

namespace detail {
// One pass over the whole batch, every op on all threads (train_step.cpp). row0: the flat index
// of the batch's first token within the whole batch (LoRA dropout masks).
TrainStepResult forward_backward_one_pass(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                                          const TrainOptions& opt, int64_t row0);
}  // namespace detail

}  // namespace medtune::model
