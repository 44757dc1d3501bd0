// One forward + backward pass of a LoRA-adapted model over a batch: the loss of the target
// tokens and the gradients of every LoRA parameter. The base model stays frozen.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/llama.h"
#include "model/lora.h"
#include "model/lora_linear.h"

namespace medtune::model {

struct TrainBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> ids;      // (B, T)
  std::vector<uint8_t> mask;     // (B, T) 1 = token, 0 = padding; empty = all tokens
  // (B, T): the id that position t must predict (the next token), or -100 (prompt, padding):
  // already shifted, so transformers' labels[t + 1] sits at targets[t].
  std::vector<int64_t> targets;
  // (B, T) RoPE position of each token, or empty: 0..T-1 in every row (one example per row).
  // Sequence packing: a row holds several examples, each restarting at position 0, and token t
  // belongs to the example that starts at t - positions[t]; attention stays inside it. This is
  // transformers' convention for packed rows (position_ids restarting at 0 mark the boundaries,
  // from which flash-attention's varlen path derives its cu_seqlens). Each row must start at 0
  // and every position be 0 or the previous one + 1.
  std::vector<int64_t> positions;
};

// Seconds of a forward_backward call by phase, added to (for benchmarks): wall clock, and the
// process's CPU time (all threads; on a loaded machine the robust measure of work done).
struct PhaseTime {
  double wall = 0;
  double cpu = 0;
};
struct StepTimes {
  PhaseTime forward;    // embeddings, rope tables and the layers' forward
  PhaseTime loss_head;  // final norm, lm_head, cross-entropy, and their backward
  PhaseTime backward;   // the layers' backward (and recomputation with checkpointing)
};

struct TrainOptions {
  // Gradients are scaled by this: 1 / (target tokens in the whole accumulated batch), so that
  // gradient accumulation gives the mean over all of them (not a mean of per-batch means).
  double loss_scale = 1.0;
  bool gradient_checkpointing = false;  // keep only each layer's input; recompute in backward
  uint64_t dropout_seed = 0;            // LoRA dropout masks for this step
  StepTimes* times = nullptr;           // non-null: phase timings are added here
  // Run the last layer's o_proj and MLP only at the target rows, the only ones the loss reads
  // (skipped anyway when every position has a target). Off: every row, for tests to compare.
  bool last_layer_rows_only = true;
  // Row shards (model/row_shards.h): 0 = automatic, 1 = one pass with every op on all threads,
  // S > 1 = S shards (at most B) run on S threads at once.
  int64_t row_shards = 0;
  // A device backend only: the batch's rows in this many passes (at most B), one after another,
  // each adding its gradients to the same accumulators, so that a pass holds the activations of
  // B / device_passes rows (train/memory_plan.h: plan_device_passes). The gradients are those of
  // one pass summed in another fp32 order, as with gradient accumulation; dropout masks and the
  // loss are each token's as in one pass. 1: the whole batch at once.
  int64_t device_passes = 1;
  // A device backend only: [layer][proj] buffers on that device that the pass adds its LoRA
  // gradients into (a trainer's, train/train_state.h), leaving the host dA, dB untouched. Null:
  // the pass accumulates into buffers of its own and adds them into the host dA, dB at its end.
  const std::vector<std::array<LoraGrad, kNumProj>>* device_grads = nullptr;
};

struct TrainStepResult {
  double loss_sum = 0;     // sum of the target tokens' cross-entropies (nats)
  int64_t tokens = 0;      // target tokens
  int64_t peak_activation_bytes = 0;
};

// Adds this batch's gradients (times loss_scale) into lora's dA/dB (or opt.device_grads); does
// not zero them first.
// With several threads the rows may be split into shards, one per thread (model/row_shards.h).
TrainStepResult forward_backward(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                                 const TrainOptions& opt);

// Loss only (no gradients): for validation.
TrainStepResult forward_loss(LlamaModel& model, const TrainBatch& batch);

// (B*T, V) logits of every position through the training path (with model.lora() if set), all
// at once: for tests on small batches (packed against unpacked rows), not for training.
std::vector<float> forward_logits(LlamaModel& model, const TrainBatch& batch);

}  // namespace medtune::model
