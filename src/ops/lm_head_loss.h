// Training's loss head at `precision: bf16` in one pass over the vocabulary: the lm_head product,
// the cross-entropy and the product back to the hidden state, without an (n, V) logits matrix.
#pragma once

#include <cstdint>

#include "ops/linear.h"
#include "ops/ops.h"

namespace medtune::ops {

// For h (n, C) and the lm_head W (V, C), with z = h·Wᵀ (n, V) and one target per row:
//   loss_n = logsumexp(z_n) − z_n[y_n],   dh_n = scale·(softmax(z_n)·W − W[y_n])
// i.e. what linear_forward_bf16, cross_entropy_loss_backward and linear_backward_input_bf16 give
// in sequence (dh = dlogits·W, dlogits = (softmax − onehot)·scale). Rows with y_n < 0 get dh_n = 0
// and no loss. Returns the losses' sum (in row order) and count, as cross_entropy_loss_backward.
//
// Why: at 4 x 256 tokens SmolLM2's logits are 50 MB per 256 rows, written by the first product,
// read and written by the softmax, read again rounded to bf16 by the second product; with the
// products on AMX that traffic, not the arithmetic, was the loss head's time (BENCHMARKS.md,
// session 39). Here the vocabulary goes by tiles of a few MB that stay in cache, as flash
// attention goes over keys: per tile, z_t = h·W_tᵀ; the row's running max M and sum of exps are
// updated (the sum in double); P_t = exp(z_t − M) is rounded to bf16 and acc_n += P_t·W_t after
// acc_n was multiplied by exp(M_old − M) where the max grew. At the end
// dh_n = acc_n·(scale / sum_n) − scale·W[y_n].
//
// Numerics, against the three-call sequence: the same bf16 operands (h and W rounded, kernel `k`:
// oneDNN or the widened SGEMM as linear_forward_bf16), fp32 sums. The second product's bf16
// operand is exp(z − M) instead of (softmax − onehot)·scale: one rounding to bf16 either way
// (relative error ≤ 2^-8 per element, as in train::bf16_tolerances), and the target's −scale·W[y]
// now exact in fp32. The rescaling adds one fp32 rounding per tile where the max grew,
// and the exps' arguments differ from the global-max ones by that max, so the results agree to
// bf16's precision, not bit for bit.
LossSum lm_head_loss_backward_bf16(float* dh, const float* h, const StoredMatrix& w,
                                   const int64_t* targets, int64_t n, float scale,
                                   Bf16Kernel k = bf16_kernel());

}  // namespace medtune::ops
