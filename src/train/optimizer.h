// AdamW with decoupled weight decay, bit-compatible with torch.optim.AdamW on the CPU
// (torch/optim/adam.py, _single_tensor_adam: the path PyTorch takes for CPU tensors, and so the one
// the Hugging Face Trainer runs there). Parameters, gradients and both moments are fp32 (DESIGN:
// LoRA weights, gradients and AdamW moments in fp32); scalars (lr, bias corrections) are double,
// as they are Python floats in torch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/adamw.h"

namespace medtune::train {

struct AdamWConfig {
  double lr = 2e-4;  // the base lr; step() takes the scheduled lr of each step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One trainable tensor: numel values (updated in place) and numel gradients (read only).
struct ParamRef {
  std::string name;
  float* data = nullptr;
  const float* grad = nullptr;
  int64_t numel = 0;
};

// cfg's hyper-parameters as ops::adamw_update and Backend::adamw_update take them.
ops::AdamWHyper hyper(const AdamWConfig& cfg);

// Throws BadInput naming the field when a value is outside what torch accepts
// (lr, eps, weight_decay >= 0; 0 <= beta < 1).
void validate(const AdamWConfig& cfg);

// One AdamW update of n elements at 1-based step `step` with learning rate `lr`, with torch's
// operations in torch's order and rounding (see optimizer.cpp). T = float is what training uses;
// T = double is the same arithmetic in float64, checked against torch's float64 run.
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWConfig& cfg, double lr,
                  int64_t step);

class AdamW {
 public:
  // Allocates the moments m and v (zeros), one block each for all parameters.
  AdamW(AdamWConfig cfg, std::vector<ParamRef> params);

  // Updates every parameter from its gradient with this step's lr (from the schedule), then
  // counts the step. The first call is step 1, as in torch.
  void step(double lr);
  // BadInput unless lr is finite and >= 0 (what step() accepts).
  static void check_lr(double lr);

  int64_t step_count() const { return step_; }
  // For resuming from a checkpoint (with m and v restored through the spans below).
  void set_step_count(int64_t t);

  const AdamWConfig& config() const { return cfg_; }
  size_t num_params() const { return params_.size(); }
  const ParamRef& param(size_t i) const { return params_.at(i); }

  // First and second moments of parameter i (torch's exp_avg and exp_avg_sq), numel floats.
  std::span<float> m(size_t i);
  std::span<const float> m(size_t i) const;
  std::span<float> v(size_t i);
  std::span<const float> v(size_t i) const;

 private:
  AdamWConfig cfg_;
  std::vector<ParamRef> params_;
  std::vector<int64_t> offset_;  // (P + 1) start of parameter i in m_ and v_
  std::vector<float> m_;         // (sum numel) first moments, parameter after parameter
  std::vector<float> v_;         // (sum numel) second moments
  int64_t step_ = 0;
};

}  // namespace medtune::train
