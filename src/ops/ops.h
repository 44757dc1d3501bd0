// Every op of a Llama decoder, declared once, on fp32 CPU buffers.
//
// Dimension legend (llm.c style), used in every shape comment:
//   N  rows (tokens = B*T)      C  model width (hidden_size)   F  MLP width (intermediate_size)
//   H  heads of a tensor        NH query heads                 NKV key/value heads
//   HD head_dim                 T  query length                S  key length (past + T)
//   V  vocabulary
//
// Each op has a plain reference path in namespace ops::ref (obvious loops, double accumulation
// where it helps clarity) used by the tests, and the fast path in namespace ops (threads, BLAS,
// vector-friendly loops). Tests compare both on random and realistic shapes.
#pragma once

#include <cstdint>

namespace medtune::ops {

// y = x * rsqrt(mean(x^2) + eps) * w, as transformers' LlamaRMSNorm in fp32.
// x, y: (N, C)   w: (C)   rstd: (N) or null (saved for the backward pass)
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps);

// Rotary embedding in Hugging Face's rotate-half convention, in place:
//   out[i]        = x[i] * cos[i] - x[i + HD/2] * sin[i]
//   out[i + HD/2] = x[i + HD/2] * cos[i] + x[i] * sin[i]        (i < HD/2)
// x: (N, H, HD)   cos, sin: (N, HD/2), one row per token (its position's angles)
void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD);

// h = silu(gate) * up, elementwise.   h, gate, up: (n)
void swiglu_forward(float* h, const float* gate, const float* up, int64_t n);

// y += x, elementwise.   y, x: (n)
void add_inplace(float* y, const float* x, int64_t n);

// Row r of a GGUF-permuted q/k projection output is HF row perm(r) (llama.cpp's converter stores
// q/k rows interleaved for its rope):
//   GGUF: head h, pair i, half j at h*HD + 2*i + j   <->   HF: h*HD + j*(HD/2) + i.
// x: (N, H, HD), rewritten in place from GGUF order into Hugging Face order.
void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD);
// The inverse: Hugging Face order back into GGUF order (the gradient of a permuted output reaches
// the stored, permuted rows through it).
void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD);

// Causal grouped-query attention over a key/value history.
//   q:   (B, T, NH, HD)   queries of the new tokens; token t of row b sits at position past + t
//   k,v: (B, Smax, NKV, HD) cache rows; positions [0, past + T) are filled
//   key_valid: (B, Smax) 1 = attend, 0 = padding; null = all valid
//   out: (B, T, NH, HD)
// Query head h reads key/value head h / (NH / NKV). Scores are scaled by 1/sqrt(HD).
// A query with no valid key (a left-padded position) outputs zeros; transformers outputs an
// unspecified mixture there, and such positions are masked out of every loss and score.
//   seg_start: (B, T) or null. Sequence packing (training): a row holds several examples and
//     seg_start[b, t] is the first position of the example token t belongs to; its query sees
//     keys [seg_start, t] only (block-diagonal causal mask), as if each example were its own row.
//     Segments tile the row (seg_start[t] is t or seg_start[t - 1]) and past must be 0; Internal
//     otherwise. The fast path computes each example's (len, len) block alone, so a packed row
//     costs Σ len² rather than T². Null: one sequence per row.
struct AttentionShape {
  int64_t B, T, past, Smax, NH, NKV, HD;
};
void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s);
inline void attention_forward(float* out, const float* q, const float* k, const float* v,
                              const uint8_t* key_valid, const AttentionShape& s) {
  ops::attention_forward(out, q, k, v, key_valid, nullptr, s);
}

// The same attention (no packing), with each query's output computed by one sequence of
// operations that depends only on its position, its q and the keys it sees: never on T, past, B
// or the queries beside it in the call. So a token's attention is bit for bit the same whether
// its prompt is read in one call, in chunks after a cache, or decoded one token at a time, and
// right padding after it changes nothing (left padding does: hidden keys before it shift the
// lanes of its softmax sum). The decode steps' kernel at every T, without BLAS (four queries
// share each key's loads): faster than attention_forward at head_dim 64, slower at 128
// (docs/decisions/cpu-dispatch.md). For the int8 route and the server's batch-invariant backend
// (backend/cpu_backend.cpp), whose results must not depend on how a text was cut into calls.
void attention_forward_fixed_order(float* out, const float* q, const float* k, const float* v,
                                   const uint8_t* key_valid, const AttentionShape& s);
// The same over a half-precision cache: k, v (B, Smax, NKV, HD) IEEE binary16 bits (the int8
// route's KV cache, model/kv_cache.h). Each element widens to fp32 exactly, so the result is bit
// for bit the fp32 form's on the widened values.
void attention_forward_fixed_order(float* out, const float* q, const uint16_t* k, const uint16_t* v,
                                   const uint8_t* key_valid, const AttentionShape& s);
// What attention_forward_fixed_order runs on this CPU, for doctor: prompts (more than 4 queries
// a row) against each task's keys transposed on AVX-512 (ops/cpu/attention_keys16.h), else
// against the keys' rows; decode steps always against the cache's rows. The same bits either way.
const char* fixed_order_attention_kernel();
// dst[r * dst_stride + c] = src[r * src_stride + c] rounded to binary16 (nearest even, overflow to
// infinity: f32_to_f16 of core/half.h) for r < rows, c < cols: appending keys and values to a
// half cache.
void store_rows_f16(uint16_t* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                    int64_t rows, int64_t cols);

// Mean cross-entropy of logits against targets, ignoring targets < 0 (Hugging Face's -100).
// logits: (N, V)   targets: (N)   returns {sum of losses in double, count of targets}
struct LossSum {
  double sum = 0;
  int64_t count = 0;
};
LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V);

namespace ref {
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps);
void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD);
void swiglu_forward(float* h, const float* gate, const float* up, int64_t n);
void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s);
inline void attention_forward(float* out, const float* q, const float* k, const float* v,
                              const uint8_t* key_valid, const AttentionShape& s) {
  ref::attention_forward(out, q, k, v, key_valid, nullptr, s);
}
}  // namespace ref

// Whether the 8-lane exp of softmax and SiLU (ops/cpu/vec_exp.h) was compiled in: it follows the
// build's baseline (AVX2 + FMA), not run-time dispatch; without it std::exp is used. For doctor.
bool vec_exp_compiled();

}  // namespace medtune::ops
