// The backward pass of every op of a Llama decoder, on fp32 CPU buffers.
//
// Training is LoRA/QLoRA: base weights are frozen, so gradients flow to activations only (the
// norm weight gradient is optional). Same dimension legend as ops.h:
//   N  rows (tokens = B*T)      C  model width                  H  heads of a tensor
//   NH query heads              NKV key/value heads             HD head_dim
//   T  query length             V  vocabulary
//
// Conventions, the same for every op:
//  - Input gradients are OVERWRITTEN, never accumulated. The caller adds residual-stream
//    gradients itself (one add_inplace), which keeps each op's contract local and lets a buffer
//    be reused without zeroing.
//  - Parameter gradients (rmsnorm's dw) ACCUMULATE, so gradient accumulation over micro-batches
//    needs no extra buffer; zero them once per optimizer step.
//  - Fast paths are deterministic for a fixed thread count: every output element is reduced by
//    one thread in a fixed order (no atomics, no scheduling-dependent reduction order).
//
// Each op has a plain reference in ops::ref, templated on the scalar type and instantiated for
// float and double: the tests check the double instance against central finite differences and
// the fast fp32 path against the float instance (which accumulates in double).
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace medtune::ops {

// Backward of rmsnorm_forward: y = w ⊙ x·r, r = (mean(x²) + eps)^-1/2 (rstd saved by the forward).
//   dx = r·(w⊙dy) − x·r³/C·Σ_c(w⊙dy⊙x)      (overwritten)
//   dw += Σ_n dy⊙x·r                         (accumulated; dw null = frozen norm, skipped)
// dx, dy, x: (N, C)   w, dw: (C)   rstd: (N)
// dx may alias dy (each row reads dy fully before writing it).
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C);

// Backward of rope_forward, in place: the rotation is orthogonal, so its transpose is the
// rotation by −θ:  dx[i] = dy[i]·cos + dy[i+HD/2]·sin,  dx[i+HD/2] = dy[i+HD/2]·cos − dy[i]·sin.
// dx: (N, H, HD) holds dy on entry, dx on return   cos, sin: (N, HD/2)
void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD);

// Backward of swiglu_forward, h = silu(g)·u:
//   dgate = dh·u·silu'(g), silu'(g) = σ(g)(1 + g(1 − σ(g)))      dup = dh·silu(g)
// dgate, dup, dh, gate, up: (n). dgate may alias gate or dh, dup may alias up or dh (elementwise).
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                     int64_t n);

// Backward of attention_forward for the training case s.past == 0 (throws Internal otherwise).
//   dq, dout, q: (B, T, NH, HD)   k, v, dk, dv: (B, Smax, NKV, HD), Smax >= T
//   key_valid: (B, Smax) or null, seg_start: (B, T) or null (packed rows), as in the forward
// Probabilities are recomputed (P is not saved). With S = scale·Q·Kᵀ (masked), P = softmax(S):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − D)·scale,  D_t = Σ_j P_tj·dP_tj (= dO_t·O_t),
//   dQ = dS·K,   dK = dSᵀ·Q
// dk and dv of a kv head sum over its group of query heads (with NH > NKV the fast path allocates a
// 2·(B, T, NH, HD) fp32 scratch for the per-head terms, so that the sums are deterministic and
// all B·NH heads run in parallel). All of dq, dk, dv are overwritten,
// including cache rows [T, Smax), which get zeros. Padded keys and queries with no visible key
// get exactly zero gradient. Packed rows: each example's block is differentiated alone (keys of
// one example get no gradient from another's queries, exactly zero), at Σ len² cost.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const uint8_t* key_valid,
                        const int64_t* seg_start, const AttentionShape& s);
inline void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const uint8_t* key_valid,
                               const AttentionShape& s) {
  ops::attention_backward(dq, dk, dv, dout, q, k, v, key_valid, nullptr, s);
}

// Backward of scale·Σ_n cross_entropy(logits_n, target_n) over targets >= 0:
//   dlogits_n = (softmax(logits_n) − onehot(target_n))·scale,   zero rows where target_n < 0.
// With gradient accumulation, scale = 1 / (targets counted over the whole optimizer step).
// dlogits, logits: (N, V)   targets: (N). dlogits may alias logits (saves an (N, V) buffer).
void cross_entropy_backward(float* dlogits, const float* logits, const int64_t* targets, int64_t N,
                            int64_t V, float scale);

// Training's loss head: cross_entropy_backward, returning also what cross_entropy_sum would (one
// pass over the logits instead of two). Each row's loss is max + log(Σ exp) − logit[target] from
// the gradient's own fp32 exps, summed in double: within ~1e-6 per row of cross_entropy_sum's
// all-double value (fp32 rounding of logit − max). Rows in parallel, losses added in row order.
LossSum cross_entropy_loss_backward(float* dlogits, const float* logits, const int64_t* targets,
                                    int64_t N, int64_t V, float scale);

namespace ref {
// Plain loops with double accumulation; T = float or double (explicitly instantiated).
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N,
                      int64_t C);
template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int64_t N, int64_t H, int64_t HD);
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n);
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s);
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const uint8_t* key_valid, const AttentionShape& s) {
  ref::attention_backward(dq, dk, dv, dout, q, k, v, key_valid, static_cast<const int64_t*>(nullptr), s);
}
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                            int64_t V, T scale);
}  // namespace ref

}  // namespace medtune::ops
