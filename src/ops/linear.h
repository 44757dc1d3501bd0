// Matrix products against frozen stored weights (any checkpoint dtype, read in place).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace medtune::ops {

// A weight matrix W of shape (rows, cols) = (out_features, in_features), stored row by row in
// `dtype` (each row holds whole quantization blocks), e.g. straight from a checkpoint mapping.
struct StoredMatrix {
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  // The same rows rounded to bf16 (rows, cols), as `precision: bf16` multiplies them, where the
  // owner keeps such a copy (model::keep_bf16_copies: frozen base weights in training, so that
  // each step does not decode and round them again); null otherwise. Never set for BF16 weights.
  const uint16_t* bf16 = nullptr;

  int64_t row_bytes() const { return dtype_row_bytes(dtype, cols); }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes(); }
};

// y (N, rows) = x (N, cols) . W^T + bias (rows, or null). fp32 compute:
//  - F32 weights: one multi-threaded SGEMM on the mapped weights (no copy);
//  - other dtypes, N small (decode): fused dequantize-and-dot per row (ops dot_row), threaded
//    over rows, so each weight byte is read once per token and never expanded in memory;
//  - other dtypes, N large (prompts, training): W is dequantized a chunk of rows at a time (up to
//    4 MiB of fp32, by all threads) into a per-thread scratch kept between calls, and each chunk
//    is multiplied with one threaded SGEMM.
void linear_forward(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N);

// The same product on the int8 route (`--precision int8`, core/quant_int8.h) when W's dtype has an
// int8 kernel (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, NF4): the N rows of x are quantized
// per block of 32 to int8 once, then dotted with the weight rows in integers, threaded over rows:
//  - N >= int8_gemm_min_tokens(dtype) (16; 8 for Q4_0 and Q4_1: prompts, scoring), where the CPU
//    has AVX2: the register-blocked GEMM (core/int8_gemm.h);
//  - otherwise, and at every N with rows_only (benchmarks and tests): the row kernels
//    (quant_int8.h).
// Both perform the same operations per element in the same order (quant_int8.h), so every element
// has the same bits whichever runs and however many tokens the call has: the route is
// batch-invariant as it is, and the server's batches take the GEMM too. (Any difference, even
// fp32 summation order, would matter here: through a model it flips the int8 rounding of some
// activations of the next layer, and the flips grow to int8's own error against fp32, up to ~0.5
// in a token's log-probability on SmolLM2 before the two kernels were given one order.)
// Other dtypes take linear_forward (fp32); int8_path() says which.
void linear_forward_int8(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N,
                         bool rows_only = false);
// Whether linear_forward_int8 computes a weight of this dtype in int8 (else in fp32).
bool int8_path(DType t);
// From how many tokens linear_forward_int8 takes the GEMM for a weight of this dtype (where the
// CPU runs it and rows_only is false); the row kernels below.
int64_t int8_gemm_min_tokens(DType t);

// One member of a group of products that read the same input (q, k and v; gate and up):
// y (N, w->rows) = x (N, cols) . W^T + bias (or null).
struct LinearOut {
  float* y;
  const StoredMatrix* w;
  const float* bias;
};
// linear_forward_int8 of each of the n members, all of whose dtypes take the int8 route and share
// cols: the same values, in one pass: x quantized once and one threaded loop over the row blocks
// of all the members. At decode a layer's projections are a few microseconds each, so one
// fork/join for q, k and v instead of three is measurable (BENCHMARKS.md).
void linear_forward_int8_group(const LinearOut* outs, int n, const float* x, int64_t N, bool rows_only = false);
// h (N, F) = swiglu(x . gate^T, x . up^T) (gate and up: F rows of cols, both on the int8 route),
// the values of linear_forward_int8_group on {gate, up} then swiglu_forward, bit for bit, without
// the (N, F) products in memory: each block of rows of gate and the same block of up go into a
// per-thread (N, 48) scratch and SwiGLU runs there while it is in cache (the products written out
// and read back made SwiGLU a memory-bound 5% of int8 letter scoring on SmolLM2, session 49).
// Where both take the GEMM (enough tokens, the CPU runs it); else false, writing nothing: the
// caller runs the two steps (a decode step's buffers are its own already).
bool linear_swiglu_int8(float* h, const float* x, const StoredMatrix& gate, const StoredMatrix& up,
                        int64_t N);

// The same product at `precision: bf16` (ops/cpu/linear_bf16.cpp): x and W rounded to bf16 (round
// to nearest even; BF16 weights as stored), products exact in fp32, sums in fp32. The kernel:
//   kOneDnn        oneDNN's bf16 matmul (AVX512-BF16 / AMX), where the CPU has native bf16;
//   kWidenedSgemm  the rounded values widened to fp32 and multiplied by SGEMM, elsewhere.
// Both compute the same products; only the order of the fp32 sums differs. For decode-sized N
// (<= 4 tokens) the forward takes neither: each weight row is decoded, rounded and dotted with the
// tokens at once, as linear_forward's fused path.
enum class Bf16Kernel { kWidenedSgemm, kOneDnn };
Bf16Kernel bf16_kernel();  // what this CPU (and MEDTUNE_ISA) allows
const char* bf16_kernel_name(Bf16Kernel k);  // "onednn", "widened-sgemm"
void linear_forward_bf16(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N,
                         Bf16Kernel k = bf16_kernel());
// linear_forward_bf16 of each of n members that read the same x (q, k and v; gate and up), with
// the same values as n calls: x rounded to bf16 once for all of them.
void linear_forward_bf16_group(const LinearOut* outs, int n, const float* x, int64_t N,
                               Bf16Kernel k = bf16_kernel());
// All of w's rows rounded to bf16 as the two functions here round them (what StoredMatrix::bf16
// holds) into out (rows, cols), threaded. w must not be BF16 (its rows are already that).
void round_rows_to_bf16(const StoredMatrix& w, uint16_t* out);
// dX (N, cols) (+)= dY (N, rows) . W at bf16, as linear_backward_input.
void linear_backward_input_bf16(float* dx, const float* dy, const StoredMatrix& w, int64_t N, bool accumulate,
                                Bf16Kernel k = bf16_kernel());

// The same product, batch-invariant (ops/cpu/linear_invariant.cpp): row n of y is bit for bit the
// same whatever N and whatever the other rows of x hold (every element one fixed-order fp32 dot of
// the dequantized weight row and x's row), so that a server's request gets the same logits alone
// or batched with others. Slower than linear_forward for long prompts (no SGEMM blocking).
void linear_forward_batch_invariant(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N);
// C (M, N) = alpha op(A) op(B) + beta C (cblas_sgemm's row-major contract; beta = 0 never reads C),
// each element one fixed-order dot as above: batch-invariant in M (the LoRA side path's products).
void gemm_batch_invariant(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// dX (N, cols) (+)= dY (N, rows) . W: the backward of linear_forward to its input (W frozen).
// accumulate: add into dx instead of overwriting it.
void linear_backward_input(float* dx, const float* dy, const StoredMatrix& w, int64_t N,
                           bool accumulate = false);

// Rows [r0, r1) of W dequantized into out ((r1 - r0), cols).
void dequantize_rows(float* out, const StoredMatrix& w, int64_t r0, int64_t r1);

namespace ref {
// Dequantize each row, accumulate in double.
void linear_forward(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N);
}  // namespace ref

}  // namespace medtune::ops
