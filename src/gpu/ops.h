// GPU kernels of the Llama decoder's ops, forward and backward, on fp32 device buffers.
//
// Each function mirrors the CPU op of the same name (src/ops/ops.h, src/ops/backward.h,
// src/train/optimizer.h, src/core/quant.h, src/core/nf4.h): same arguments in the same order,
// same shapes, same aliasing rules, same semantics, plus the stream the kernels are queued on.
// Every pointer is a DEVICE pointer. Calls are asynchronous: results are ready after
// stream.synchronize() (or a *_sync copy). tests/gpu/ checks each against its CPU reference.
//
// Same dimension legend as ops.h (N rows, C width, H heads, HD head_dim, V vocabulary, n elements).
//
// The GEMMs (cuBLAS / hipBLAS) are in gpu/blas.h.
// Not here yet (issue #8, later steps): cross-entropy fused with the lm_head in vocabulary
// chunks, the LoRA side path, bf16 storage variants of the kernels (fp32 -> bf16 rounding is
// here), bf16 (tensor-core) attention.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "gpu/runtime.h"
#include "ops/ops.h"

namespace medtune::gpu {

// ---- embedding (no CPU op of its own: the model dequantizes table rows, model/llama.cpp)
// out[n, :] = table[ids[n], :].   out: (N, C)   table: (V, C)   ids: (N), int64 on the device.
// An id outside [0, V) yields a row of NaNs (never another token's row), so a bad id shows up in
// the loss instead of training on garbage; ids are validated on the host before upload.
void embedding_forward(float* out, const float* table, const int64_t* ids, int64_t N, int64_t C,
                       int64_t V, const Stream& stream);
// dtable[ids[n], :] += dout[n, :] (accumulated, like every parameter gradient in backward.h).
// Deterministic: each column is summed by one thread over n in order (no atomics), so the result
// is bit-identical to the obvious CPU loop. Out-of-range ids are skipped.
void embedding_backward(float* dtable, const float* dout, const int64_t* ids, int64_t N, int64_t C,
                        int64_t V, const Stream& stream);
// The model's lookup from its stored table (model/llama.cpp: dequantize_row of row ids[n]):
// out[n, :] = the C values of row ids[n] of a (V, C) table of type t, decoded to fp32.
// table: V rows back to back, each dtype_row_bytes(t, C) bytes (core/dtype.h; for NF4 medtune's
// row blocks, as gpu::dequantize)   ids: (N), int32 on the device   out: (N, C).
// Types: those gpu::dequantize supports (dequantize_supported), bit-exact with
// medtune::dequantize_row (nf4::dequantize_blocks for NF4); Internal otherwise, and when C is not a
// multiple of t's block. An id outside [0, V) yields a row of NaNs, as embedding_forward (the CPU
// model throws BadInput there: the caller validates ids on the host before upload).
void embedding_rows(DType t, const void* table, const int32_t* ids, float* out, int64_t N,
                    int64_t C, int64_t V, const Stream& stream);

// ---- RMSNorm (ops::rmsnorm_forward / ops::rmsnorm_backward)
// x, y: (N, C)   w: (C)   rstd: (N) or null
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps, const Stream& stream);
// dx, dy, x: (N, C)   w, dw: (C)   rstd: (N). dx overwritten (may alias dy); dw accumulated
// (null = frozen norm).
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C, const Stream& stream);

// ---- RoPE, rotate-half convention, in place (ops::rope_forward / ops::rope_backward)
// x: (N, H, HD)   cos, sin: (N, HD/2)
void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD,
                  const Stream& stream);
void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD,
                   const Stream& stream);

// ---- SwiGLU (ops::swiglu_forward / ops::swiglu_backward)   all buffers: (n)
void swiglu_forward(float* h, const float* gate, const float* up, int64_t n, const Stream& stream);
// dgate may alias gate or dh, dup may alias up or dh.
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                     int64_t n, const Stream& stream);

// ---- cross-entropy over given logits (ops::cross_entropy_sum / ops::cross_entropy_backward)
// losses[n] = logsumexp(logits[n]) - logits[n, targets[n]], or 0 where targets[n] < 0.
// logits: (N, V)   targets: (N) int64   losses: (N). The caller sums the rows (in double) to get
// ops::LossSum; the count is the number of targets >= 0, known on the host.
void cross_entropy_forward(float* losses, const float* logits, const int64_t* targets, int64_t N,
                           int64_t V, const Stream& stream);
// dlogits = (softmax(logits) - onehot(target))·scale, zero rows where target < 0.
// dlogits, logits: (N, V); dlogits may alias logits.
void cross_entropy_backward(float* dlogits, const float* logits, const int64_t* targets, int64_t N,
                            int64_t V, float scale, const Stream& stream);

// ---- AdamW (ops::adamw_update<float>): one update of n elements at 1-based `step` with
// learning rate `lr`; p updated, m and v (fp32 moments) updated. The scalars are formed on the host
// in double exactly as the CPU does, and every element's arithmetic rounds as the CPU's, so the
// result is bit-identical to ops::adamw_update<float>.
struct AdamWScalars {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& cfg,
                  int64_t step, const Stream& stream);

// ---- init + the sum of x[i]^2 in double (ops::sum_squares), waited for and returned to the host.
// Deterministic run to run (a launch shape fixed by n, a fixed tree); not the CPU's sequential
// sum's last bits (sum_squares.cu).
double sum_squares(const float* x, int64_t n, double init, const Stream& stream);

// ---- dequantization to fp32 (medtune::dequantize_row; nf4::dequantize_blocks for NF4)
// src: n elements of type t, laid out as on the CPU (ggml blocks; NF4 = medtune's row blocks: f32
// absmax | 32 bytes per 64 values, first element in the high nibble). n a multiple of the block.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS, NF4 (bit-exact with the CPU); Internal otherwise.
void dequantize(DType t, const void* src, float* dst, int64_t n, const Stream& stream);
bool dequantize_supported(DType t);

// ---- the bf16 linear layers' product for a few tokens (gpu/gemv.cu; NEVER RUN on a GPU yet):
// y[n * y_stride + r] = Σ_c x[n, c]·W[r, c] for n < N <= kGemvMaxTokens, r < rows; x (N, cols)
// and W (rows, cols) bf16 bits, products exact in fp32, summed in fp32 (the GEMM's contract in
// another order: decode steps, where the BLAS's GEMM reads the weights far below the bandwidth).
inline constexpr int64_t kGemvMaxTokens = 8;
void gemv_bf16(float* y, int64_t y_stride, const uint16_t* x, const uint16_t* w, int64_t N,
               int64_t rows, int64_t cols, const Stream& stream);
// The same with W as stored (type t, any type dequantize takes; rows of dtype_row_bytes(t, cols)
// bytes), each weight decoded and rounded to bf16 in the kernel: the bits of dequantize, then
// f32_to_bf16, then gemv_bf16 (its 16-byte path), without W's fp32 and bf16 copies. cols % 8 == 0
// and x 16-byte aligned (Internal otherwise).
void gemv_stored_bf16(float* y, int64_t y_stride, const uint16_t* x, DType t, const void* w,
                      int64_t N, int64_t rows, int64_t cols, const Stream& stream);
// Several such products of one x (a decode step's q, k and v; gate and up): member i writes
// y_i[n * y_stride_i + r] for r < rows_i from its W_i (type t_i, cols columns), every element the
// bits of gemv_stored_bf16 for that member alone, in one launch per run of members of one type
// (launches, not bytes, bound a 7B decode step: ~700 a token). At most kGemvMaxMembers.
inline constexpr int kGemvMaxMembers = 4;
struct GemvMember {
  float* y;
  int64_t y_stride;
  DType t;
  const void* w;
  int64_t rows;
};
void gemv_stored_bf16_group(const GemvMember* members, int n, const uint16_t* x, int64_t N,
                            int64_t cols, const Stream& stream);

// ---- causal GQA attention (ops::attention_forward / ops::attention_backward), flash-style: no
// (T, T) score matrix in device memory. Same shapes, masks and semantics as the CPU op (ops.h):
//   q, out, dq, dout: (B, T, NH, HD)   k, v, dk, dv: (B, Smax, NKV, HD)   key_valid: (B, Smax) or
//   null   seg_start: (B, T) or null (packed rows; past must be 0)
// One addition to the CPU signature: the forward also writes each query row's logsumexp of the
// scaled, masked scores, lse: (B, T, NH) (null = not wanted; −inf for a row with no visible key),
// and the backward takes it with the forward's output instead of recomputing the softmax
// statistics (the CPU backward recomputes them). seg_start must tile each row as the CPU requires
// (ops::detail::check_segments, done by the caller on the host before upload): the kernels mask
// pair by pair, they do not validate it. HD <= 256 (Internal otherwise).
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start,
                       const ops::AttentionShape& s, const Stream& stream);
// Training case past = 0 (Internal otherwise). dq, dk, dv overwritten, cache rows [T, Smax) of
// dk, dv get zeros; padded keys and rows with no visible key get exactly zero gradient.
// Deterministic (no atomics): dK, dV sum over the kv group's heads and the queries in order.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const uint8_t* key_valid, const int64_t* seg_start,
                        const ops::AttentionShape& s, const Stream& stream);

// The forward for decode steps (gpu/attention_split.cu; NEVER RUN on a GPU yet): T <=
// kSplitMaxQueries queries per row, no packed rows (Internal otherwise), split over the keys so
// that a step's few query rows still fill the device; `work` holds
// split_attention_workspace_bytes(B, T, past + T, NH, HD) bytes (gpu/attention_plan.h; Internal
// for less). Same contract as attention_forward otherwise, HD <= 256.
void attention_forward_split(void* work, int64_t work_bytes, float* out, float* lse,
                             const float* q, const float* k, const float* v,
                             const uint8_t* key_valid, const ops::AttentionShape& s,
                             const Stream& stream);

// The same two ops through the vendor's BLAS (gpu/attention_gemm.cu; NEVER RUN on a GPU yet):
// the scores materialized a chunk of kv heads at a time in `work`, as many kv heads per chunk as
// work_bytes holds (plan_attention_gemm(...).workspace_bytes() holds the planned chunk;
// gpu/attention_plan.h), for shapes whose plan has use = true (Internal otherwise, and for a
// workspace below one kv head). Queued on blas's stream. Same contract as above, any HD.
class Blas;
void attention_forward_gemm(const Blas& blas, void* work, int64_t work_bytes, float* out,
                            float* lse, const float* q, const float* k, const float* v,
                            const uint8_t* key_valid, const int64_t* seg_start,
                            const ops::AttentionShape& s);
void attention_backward_gemm(const Blas& blas, void* work, int64_t work_bytes, float* dq, float* dk,
                             float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v,
                             const uint8_t* key_valid, const int64_t* seg_start,
                             const ops::AttentionShape& s);

// ---- elementwise and row moves of the forward pass (elementwise.cu). Each element's result is one
// fp32 addition, one fp32 product or a copy (and, for dropout, integer arithmetic): bit-identical
// to the plain CPU loop.
// y += x (ops::add_inplace).   y, x: (n); x may be y.
void add_inplace(float* y, const float* x, int64_t n, const Stream& stream);
// y *= s.   y: (n)
void scale_inplace(float* y, float s, int64_t n, const Stream& stream);
// y[n, j] += bias[j].   y: (N, cols)   bias: (cols)
void add_bias(float* y, const float* bias, int64_t N, int64_t cols, const Stream& stream);
// dst[i, :] = src[rows[i], :].   dst: (M, C)   src: (any number of rows > every rows[i], C)
// rows: (M), int64 on the device; each in range of src (not checked on the device: the caller
// knows src's height). Repeated rows are fine. dst must not overlap src.
void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C,
                 const Stream& stream);
// dst[rows[i], :] = src[i, :].   src: (M, C)   dst: (any number of rows > every rows[i], C)
// rows: (M), int64 on the device, each in range and all DISTINCT (two equal rows would race:
// either value may win). Rows of dst not named are left as they are. dst must not overlap src.
void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C,
                  const Stream& stream);
// In place, the CPU's ops::undo_gguf_qk_permutation (ops/ops.h): x (N, H, HD)
// from GGUF's row order into Hugging Face's, per head: GGUF element h*HD + 2*i + j -> HF element
// h*HD + j*(HD/2) + i.
// HD even and <= 256 (Internal otherwise).
void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD, const Stream& stream);
// Its inverse, ops::redo_gguf_qk_permutation: HF order back into GGUF's (the backward pass).
void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD, const Stream& stream);
// LoRA dropout (ops::lora_dropout, ops/dropout.h): xd (N, in) = x under the mask of the stream
// starting at `base`, kept elements times keep_scale; xd may be x. Row n draws the counters of row
// row0 + (rows ? rows[n] : n); rows: (N), int64 on the device, or null. base, threshold and
// keep_scale: ops::dropout::stream_base / threshold / keep_scale of the site, computed on the host.
void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, uint64_t base, uint64_t threshold,
                  float keep_scale, const int64_t* rows, int64_t row0, const Stream& stream);

// ---- fp32 -> bf16 bits, round to nearest even (medtune::f32_to_bf16 in core/half.h, bit-exact for
// every non-NaN input; a NaN stays a NaN, its payload bits are the vendor's).
// dst: (n) uint16 bf16 bits   src: (n)
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, const Stream& stream);

}  // namespace medtune::gpu
