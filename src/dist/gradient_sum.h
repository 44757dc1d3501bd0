// The sum of one optimizer step's gradients over every micro-batch of the global batch, on every
// rank. The global batch is micro_batch_size x gradient_accumulation_steps x world; rank r runs
// the micro-batches r*A .. r*A+A-1 of it (A = gradient_accumulation_steps), in the order one
// process with A x world accumulation would run them all.
//
// Deterministic mode (the default on the CPU) adds the micro-batches' gradients in that global
// order, whatever the world size: rank 0 adds its own and passes the partial sum to rank 1, which
// adds its own, and so on; the last rank broadcasts the total. The result is bit for bit what one
// process gets (it adds its micro-batches in the same order, each computed from zeroed
// gradients), so N ranks train the same adapter as one process with N x accumulation. Cost: the
// sum crosses the ranks one after the other, then the last rank broadcasts it, and a rank other
// than 0 keeps its A micro-batches' gradients until the partial sum reaches it. The chain runs in
// buckets (kBucketFloats, 16 MiB): rank r adds bucket b and passes it on while rank r + 1 adds
// bucket b - 1, so a large buffer crosses N ranks in about one buffer's send time plus N - 2
// buckets', not N - 1 whole sends (the additions per element are the same, so are the bits).
// Otherwise (deterministic off) each rank adds its own and one all-reduce adds the
// ranks' sums in the engine's order (MPI's, NCCL's ring): faster for many ranks, equal to one
// process only to fp32 reassociation.
//
// The buffer exchanged is all LoRA gradients flattened in parameter order, then the step's loss
// sum (a double, in two floats' room).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dist/communicator.h"

namespace medtune::dist {

class StepGradientSum {
 public:
  static constexpr size_t kBucketFloats = size_t{4} << 20;

  // grads: the adapter's gradient buffers, which forward_backward writes into; `deterministic`:
  // the ordered sum above, else one all-reduce. bucket_floats: the ordered chain's bucket (tests
  // use small ones).
  StepGradientSum(Communicator& comm, std::vector<std::span<float>> grads, bool deterministic,
                  size_t bucket_floats = kBucketFloats);

  // Before the step's first micro-batch.
  void begin_step();
  // After one of this rank's micro-batches ran into `grads` from zero (the caller zeroes them
  // before each micro-batch): keeps its gradients and loss sum for the step.
  void add_micro_batch(double loss_sum);
  // The sum over the whole global batch: written into `grads` (the same bits on every rank); the
  // return value is the global loss sum. `step` names the exchange in timeout messages.
  double finish(int64_t step);

  // Floats exchanged per step (gradients plus the loss sum's two).
  size_t buffer_floats() const { return acc_.size(); }
  // Wall seconds spent in finish() so far: the exchange, waiting for the slowest rank included.
  double exchange_seconds() const { return exchange_s_; }

 private:
  void flatten_into(std::vector<float>& buf, double loss_sum) const;
  void add_grads_into(std::vector<float>& acc) const;
  static double loss_of(const std::vector<float>& buf);
  static void set_loss(std::vector<float>& buf, double loss_sum);

  Communicator& comm_;
  std::vector<std::span<float>> grads_;
  bool deterministic_;
  size_t bucket_floats_;
  size_t num_grads_ = 0;
  std::vector<float> acc_;                 // (num_grads + 2) the running sum, then the total
  int64_t micro_in_step_ = 0;
  std::vector<std::vector<float>> kept_;   // deterministic, rank > 0: each micro-batch's buffer
  size_t kept_count_ = 0;                  // of kept_ in use this step (the buffers are reused)
  double exchange_s_ = 0;
};

}  // namespace medtune::dist
