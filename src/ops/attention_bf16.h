// Causal attention forward and backward at `precision: bf16` (ops/cpu/attention_bf16.cpp): the
// fp32 functions' computation (ops.h attention_forward, backward.h attention_backward, same shapes,
// masks, packing and outputs) with every matrix product's operands rounded to bf16, as
// linear_forward_bf16 rounds its own and as PyTorch's CPU bf16 autocast runs attention's matmuls:
//   forward   S = scale·Q̃·K̃ᵀ (fp32 sums), P = softmax(S) in fp32, O = P̃·Ṽ
//   backward  P recomputed as above; dV = P̃ᵀ·dÕ, dP = dÕ·Ṽᵀ, D_t = Σ_j P_tj·dP_tj (double),
//             dS = P ⊙ (dP − D)·scale in fp32, dQ = dS̃·K̃, dK = dS̃ᵀ·Q̃
// where X̃ is X rounded to bf16 (round to nearest even). Kernel `k`: oneDNN's bf16 matmul where the
// CPU multiplies bf16 natively, else the rounded values widened to fp32 through SGEMM (the same
// products; only the order of the fp32 sums differs, as linear.h says of its two kernels).
//
// Why: SmolLM2's attention products at 4 x 256 tokens were ~0.29 s of a 2.2 s bf16 training step
// on a Zen 4 in fp32 SGEMM (BENCHMARKS.md, session 56); bf16's products run at about twice its
// rate there.
//
// Numerics against the fp32 functions: each product's operands carry bf16's relative error
// (<= 2^-8 each), so S, O, dV, dP, dQ and dK move by 2^-8-sized relative amounts (the bound per
// element: tests/unit/ops/test_attention_bf16.cpp), which train::bf16_tolerances counts inside
// each layer's attention stage (src/train/parity.h).
#pragma once

#include <cstdint>

#include "ops/linear.h"
#include "ops/ops.h"

namespace medtune::ops {

// attention_forward at bf16. Key history (s.past > 0) is allowed: rows [0, past + T) of each
// batch row's cache are rounded for the call.
void attention_forward_bf16(float* out, const float* q, const float* k, const float* v,
                            const uint8_t* key_valid, const int64_t* seg_start,
                            const AttentionShape& s, Bf16Kernel kernel = bf16_kernel());

// attention_backward at bf16: the training case only (past == 0; Internal otherwise).
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const uint8_t* key_valid,
                             const int64_t* seg_start, const AttentionShape& s,
                             Bf16Kernel kernel = bf16_kernel());

}  // namespace medtune::ops
