// The trainable state of a run in its backend's memory, and the optimizer step on it: the
// adapter's A and B, the step's gradients and AdamW's moments; the gradient norm, clipping, the
// AdamW update and the finiteness check as backend ops. The trainer (trainer.cpp) drives the CPU
// and a device through this one sequence.
//
// On the CPU the state IS the host objects (the adapter's A, B, dA, dB vectors and AdamW's
// moments): nothing is copied, and every op is the host arithmetic it always was (one running
// double sum for the norm, the fp32 multiply of clipping, ops::adamw_update). On a device it is
// four flat arrays there, one segment per parameter in AdamW's order, each on a 256-byte
// boundary: parameters, gradients, m and v. LoraLinear::device_A/B point the model's LoRA path at
// the parameters, so the forward, backward and update of a step never copy the adapter; the
// step's summed gradients arrive with one upload (load_gradients), and the host copies of A, B,
// m and v lag behind until to_host() (checkpoints, the end of the run). With one rank, the sum
// over micro-batches stays on the device too (begin_pass, end_pass), and so it does with several
// ranks exchanging it in one all-reduce (allreduce_gradients); the ordered exchange, which keeps
// each micro-batch's gradients apart, forms it on the host (dist/gradient_sum.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/array.h"
#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/lora.h"
#include "model/lora_flat.h"
#include "model/lora_linear.h"
#include "train/optimizer.h"

namespace medtune::train {

class TrainState {
 public:
  // adamw's parameters must be lora's A and B with dA and dB as gradients (trainer.cpp's
  // lora_params). On a device, call to_device() before the first step.
  TrainState(backend::Backend& be, model::LoraWeights& lora, AdamW& adamw);
  ~TrainState();  // clears LoraLinear::device_A/B
  TrainState(const TrainState&) = delete;
  TrainState& operator=(const TrainState&) = delete;

  bool on_device() const { return !be_.device().is_cpu(); }

  // The host A, B, m and v into the state (after initialisation or a resume); no-op on the CPU.
  void to_device();
  // The host dA, dB (the step's sum over its micro-batches) into the state's gradients; no-op on
  // the CPU, where they are the same memory.
  void load_gradients();
  // On a device, the sum over a step's micro-batches can stay there: each pass adds into the
  // buffers begin_pass returns, zeroed (model::TrainOptions::device_grads). For a step's first
  // micro-batch they are the step's gradients themselves; for a later one a pass buffer, which
  // end_pass adds into them (one fp32 addition per element, in micro-batch order: the host sum's
  // bits; the first pass's values are the host sum's first term, -0 included). The pass buffer
  // is allocated at the first later micro-batch: a run of one micro-batch per step holds none,
  // four arrays of the adapter's size and not five. Device only (Internal on the CPU, whose
  // passes write the host dA, dB).
  const std::vector<std::array<model::LoraGrad, model::kNumProj>>* begin_pass(bool first);
  void end_pass(bool first);
  // With several ranks summing on their devices: the step's gradients (each rank's sum over its
  // micro-batches, add_pass_to_step) and loss_sum become their sums over the ranks, returned as
  // the global loss sum. An engine that reads device memory (NCCL/RCCL) sums the gradient array
  // where it is; any other gets it staged through the host (one download, its all-reduce, one
  // upload). The loss crosses on the host, a double. The array's padding is zeros on every rank
  // and stays zero. Under one engine the result is the host all-reduce's bit for bit
  // (dist/gradient_sum.h, deterministic off): each rank adds its micro-batches in the same order
  // and the engine adds the ranks' sums in its own. Device only.
  double allreduce_gradients(dist::Communicator& comm, double loss_sum, const std::string& what);
  // Bytes allreduce_gradients exchanges (the gradient array and the loss).
  int64_t exchange_bytes() const;
  // sqrt of the sum of every gradient element squared (train::global_grad_norm's bits on the CPU).
  double grad_norm();
  // Every gradient *= coef.
  void scale_gradients(float coef);
  // One AdamW update at learning rate lr from the gradients; counts the step in the AdamW object.
  void adamw_step(double lr);
  // Whether every element of A and B is finite.
  bool params_finite();
  // A and B into the adapter's host vectors, m and v into the AdamW object's; no-op on the CPU.
  void to_host();

  // Device bytes held (0 on the CPU): parameters, gradients, m, v, and the pass buffer once used.
  int64_t device_bytes() const;

 private:
  // One parameter's four buffers in the backend's memory, n elements each.
  struct Segment {
    float* p;
    float* g;
    float* m;
    float* v;
    int64_t n;
  };
  // On a device, the whole state is one segment over the flat arrays (padding included: zeros,
  // which AdamW keeps at zero and which add nothing to a sum of squares).
  std::vector<Segment> segments_;

  backend::Backend& be_;
  model::LoraWeights& lora_;
  AdamW& adamw_;
  model::LoraFlatLayout layout_;  // of the device's arrays; parameter i is matrix i
  backend::Array<float> p_, g_, m_, v_;
  backend::Array<float> pass_;   // device: a later micro-batch's gradients, laid out as g_
  // [layer][proj] into g_ and into pass_ (empty until the first later micro-batch).
  std::vector<std::array<model::LoraGrad, model::kNumProj>> step_table_, pass_table_;
};

}  // namespace medtune::train
