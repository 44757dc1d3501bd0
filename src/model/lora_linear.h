// A frozen projection with an optional LoRA side path, forward and backward:
//   y = W x + b + s * B (A d(x)),   d = dropout (identity in eval or when p = 0)
// Written against a backend (backend/backend.h): activations (x, y, u, dy, dx and the scratch) are
// that backend's memory; the adapter's A and B are read through be.resident(), and the backward
// passes accumulate into gradient buffers of that backend (LoraGrad). Dropout masks are drawn by
// the backend (the same bits on every one: ops/dropout.h).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/lora.h"
#include "ops/dropout.h"
#include "ops/linear.h"

namespace medtune::model {

// LoRA dropout's masks (ops/dropout.h): the backend applies them (Backend::lora_dropout).
using DropoutSite = ops::DropoutSite;

// y (N, out) = W x + bias. When `lora` is enabled also y += s B u with u = A d(x) (N, r) saved
// in `u` (when non-null) for the backward pass. `xd` is (N, in) scratch, used only with dropout.
void project_forward(backend::Backend& be, float* y, const float* x, const ops::StoredMatrix& W, const float* bias,
                     const LoraLinear* lora, float s, const DropoutSite& d, float* u, float* xd,
                     int64_t N);

// The LoRA part alone: y (N, out) += s B (A d(x)); u (N, r) receives A d(x).
void lora_forward_add(backend::Backend& be, float* y, const float* x, const LoraLinear& lora, float s,
                      const DropoutSite& d, float* u, float* xd, int64_t N);
// Its first half alone: u (N, r) = A d(x), what the backward reads (a recomputed forward that
// needs no output).
void lora_forward_u(backend::Backend& be, const float* x, const LoraLinear& lora,
                    const DropoutSite& d, float* u, float* xd, int64_t N);

// Where a projection's LoRA gradients accumulate: memory of the backend computing them. On the CPU
// the adapter's own dA, dB (host_grads); elsewhere arrays of the device (train_step.cpp).
struct LoraGrad {
  float* dA = nullptr;  // (r, in)
  float* dB = nullptr;  // (out, r)
};
inline LoraGrad host_grads(LoraLinear& l) { return {l.dA.data(), l.dB.data()}; }

// Projections that read the same input x (q, k, v read n1; gate and up read n2), LoRA enabled,
// without dropout: their A matrices are stacked so that u = x [A_1; A_2; ...]^T (N, r_1 + r_2 +
// ...) is one GEMM instead of one per projection, and so are dA and the dx term of the backward.
// Rank-16 GEMMs are skinny, which OpenBLAS runs inefficiently: fewer, wider ones do less overhead.
struct LoraGroupForward {
  const LoraLinear* lora;
  float* y;  // (N, out) += s B u
  float* u;  // (N, r) receives A x, for the backward; may be null
};
struct LoraGroupBackward {
  const LoraLinear* lora;
  LoraGrad grad;      // dA, dB accumulate here
  const float* dy;    // (N, out) dL/dy
  const float* u;     // (N, r) A x from the forward
};
void lora_group_forward(backend::Backend& be, const LoraGroupForward* g, int n, const float* x, float s, int64_t N);
// dB_i += s dy_i^T u_i,  dA_i += (s dy_i B_i)^T x,  dx (N, in) += sum_i (s dy_i B_i) A_i
// (dx null: the input gradient is not wanted and not computed).
void lora_group_backward(backend::Backend& be, float* dx, const LoraGroupBackward* g, int n, const float* x, float s,
                         int64_t N);

// The LoRA part of project_backward alone; dx null skips the input gradient.
void lora_backward(backend::Backend& be, float* dx, const float* dy, const float* x, const LoraLinear& lora,
                   const LoraGrad& grad, float s,
                   const DropoutSite& d, const float* u, float* du, float* xd, int64_t N);

// Backward of project_forward. dy_base drives W's part (differs from dy only when the base
// output was permuted after projecting), dy the LoRA part.
//   dx (N, in) (+)= dy_base W + d'(s (dy B) A)     (accumulate selects +=)
//   grad.dA += (s dy B)^T d(x),  grad.dB += s dy^T u   (lora null or disabled: W's part only)
// `du` is (N, r) scratch, `xd` (N, in) scratch.
void project_backward(backend::Backend& be, float* dx, const float* dy_base, const float* dy, const float* x,
                      const ops::StoredMatrix& W, const LoraLinear* lora, const LoraGrad& grad, float s,
                      const DropoutSite& d, const float* u, float* du, float* xd, int64_t N,
                      bool accumulate);

}  // namespace medtune::model
