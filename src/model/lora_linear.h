// A frozen projection with an optional LoRA side path, forward and backward:
//   y = W x + b + s * B (A d(x)),   d = dropout (identity in eval or when p = 0)
#pragma once

#include <cstdint>

#include "model/lora.h"
#include "ops/linear.h"

namespace medtune::model {

// Dropout on the LoRA input is a pure function of (seed, site, element): the backward pass
// regenerates the mask instead of storing it, and a resumed run draws the same masks.
struct DropoutSite {
  float p = 0;        // drop probability; 0 = off
  uint64_t seed = 0;  // per step: mixes the run seed and the optimizer step
  uint64_t site = 0;  // per layer and projection
};

// x (N, in) -> xd (N, in) with the mask of `d` applied (kept elements scaled by 1/(1-p)).
void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const DropoutSite& d);

// y (N, out) = W x + bias. When `lora` is enabled also y += s B u with u = A d(x) (N, r) saved
// in `u` (when non-null) for the backward pass. `xd` is (N, in) scratch, used only with dropout.
void project_forward(float* y, const float* x, const ops::StoredMatrix& W, const float* bias,
                     const LoraLinear* lora, float s, const DropoutSite& d, float* u, float* xd,
                     int64_t N);

// The LoRA part alone: y (N, out) += s B (A d(x)); u (N, r) receives A d(x).
void lora_forward_add(float* y, const float* x, const LoraLinear& lora, float s,
                      const DropoutSite& d, float* u, float* xd, int64_t N);

// Backward of project_forward. dy_base drives W's part (differs from dy only when the base
// output was permuted after projecting), dy the LoRA part.
//   dx (N, in) (+)= dy_base W + d'(s (dy B) A)     (accumulate selects +=)
//   lora.dA += (s dy B)^T d(x),  lora.dB += s dy^T u
// `du` is (N, r) scratch, `xd` (N, in) scratch.
void project_backward(float* dx, const float* dy_base, const float* dy, const float* x,
                      const ops::StoredMatrix& W, LoraLinear* lora, float s,
                      const DropoutSite& d, const float* u, float* du, float* xd, int64_t N,
                      bool accumulate);

}  // namespace medtune::model
