// Attention at `precision: bf16` (ops/attention_bf16.h): the fp32 fast paths' tiling
// (attention.cpp, attention_backward.cpp: one task per (batch row, query head), query tiles of
// kQueryTile that see only the keys up to their last query, packed rows block by block) with each
// product's operands rounded to bf16 first.
//
// The queries, keys, values (and the output gradient) are rounded once per call into
// operand-sized buffers (half the bytes of fp32 on the oneDNN kernel); the probabilities and dS
// once per tile, after their fp32 softmax and Jacobian. Transposed operands (Pᵀ, dSᵀ) are passed
// as such to the product, never copied.
#include "ops/attention_bf16.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/attention_grads.h"
#include "ops/cpu/attention_mask.h"
#include "ops/cpu/bf16_rows.h"
#include "ops/cpu/onednn_matmul.h"

namespace medtune::ops {

namespace {

// One operand element: the bf16 bits for oneDNN, or the bf16 value widened to fp32 for SGEMM.
inline void put(uint16_t& o, float f) {
  o = detail::bf16_bits(f);
}
inline void put(float& o, float f) {
  o = round_through_bf16(f);
}

// C (M, N) = op(A) · op(B), or C += with acc; fp32 sums of exact products. a_t: A given as its
// transpose (K rows of M elements, row stride lda); b_t: B given as its transpose (N rows of K).
void product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool a_t,
             const uint16_t* B, int64_t ldb, bool b_t, float* C, int64_t ldc, bool acc) {
  onednn::matmul_bf16(M, N, K, A, lda, B, ldb, b_t, C, ldc, acc, a_t);
}
void product(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool a_t, const float* B,
             int64_t ldb, bool b_t, float* C, int64_t ldc, bool acc) {
  cblas_sgemm(CblasRowMajor, a_t ? CblasTrans : CblasNoTrans, b_t ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), acc ? 1.0f : 0.0f, C,
              static_cast<int>(ldc));
}

// The calling thread's buffers, kept between calls (a layer's q alone is 2.4 MB of fp32 per 1024
// SmolLM2 tokens); garbage on entry. The calling thread takes the operands' slots, each thread of
// the parallel region its own tile slots.
enum Slot { kQ, kK, kV, kDout, kTileP, kTileDp, kTileRounded, kSlots };
template <typename E>
E* buffer(Slot slot, int64_t n) {
  thread_local std::vector<E> bufs[kSlots];
  std::vector<E>& b = bufs[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// dst (B, rows, width) = rows [0, rows) of each batch row of src (B, src_rows, width), rounded.
// An orphaned `omp for`: called inside a parallel region, it splits the rows over its threads and
// ends at a barrier.
template <typename E>
void round_rows(E* dst, const float* src, int64_t B, int64_t rows, int64_t src_rows,
                int64_t width) {
#pragma omp for schedule(static)
  for (int64_t r = 0; r < B * rows; ++r) {
    const float* in = src + ((r / rows) * src_rows + r % rows) * width;
    E* o = dst + r * width;
    for (int64_t c = 0; c < width; ++c) put(o[c], in[c]);
  }
}

// n elements rounded by the calling thread alone: detail::round_to_bf16 would open a parallel
// region of its own, and this runs inside one, once per tile.
template <typename E>
void round_tile(E* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) put(dst[i], src[i]);
}

// Scores (m, n) of queries [i0, i0 + m) against keys [k0, k0 + n) -> probabilities in place: the
// scale, then softmax over the keys each query sees (attention_mask.h), as the fp32 paths.
void scaled_softmax(float* scores, int64_t m, int64_t n, float scale, int64_t past, int64_t i0,
                    int64_t k0, const uint8_t* key_valid, int64_t b, int64_t Smax) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = scores + i * n;
    for (int64_t c = 0; c < n; ++c) row[c] *= scale;
    const int64_t p = past + i0 + i;  // absolute query position; keys k0 + c <= p
    detail::softmax_visible_row(row, n, p - k0 + 1, key_valid, b, Smax, k0, p);
  }
}

template <typename E>
void forward(float* out, const float* q, const float* k, const float* v, const uint8_t* key_valid,
             const int64_t* seg_start, const AttentionShape& s) {
  const int64_t group = s.NH / s.NKV, L = s.past + s.T, HD = s.HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int64_t q_stride = s.NH * HD, kv_stride = s.NKV * HD;
  E* qr = buffer<E>(kQ, s.B * s.T * q_stride);  // (B, T, NH, HD)
  E* kr = buffer<E>(kK, s.B * L * kv_stride);   // (B, L, NKV, HD): the rows the call reads
  E* vr = buffer<E>(kV, s.B * L * kv_stride);
  const int64_t M = detail::longest_segment(seg_start, s.B, s.T);  // T without packing
  const int64_t tile = std::min(M, detail::kQueryTile);
#pragma omp parallel
  {
    round_rows(qr, q, s.B, s.T, s.T, q_stride);
    round_rows(kr, k, s.B, L, s.Smax, kv_stride);
    round_rows(vr, v, s.B, L, s.Smax, kv_stride);
    float* scores = buffer<float>(kTileP, tile * (s.past + M));  // (tile, n) of the largest block
    E* pr = buffer<E>(kTileRounded, tile * (s.past + M));        // the same, rounded
#pragma omp for schedule(static)
    for (int64_t task = 0; task < s.B * s.NH; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      for (int64_t r0 = 0; r0 < s.T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, s.T, r0);
        const int64_t k0 = seg_start == nullptr ? 0 : r0;
        const E* kb = kr + (b * L + k0) * kv_stride + g * HD;  // (n, HD), row stride kv_stride
        const E* vb = vr + (b * L + k0) * kv_stride + g * HD;
        for (int64_t i0 = r0; i0 < r1; i0 += tile) {
          const int64_t i1 = std::min(r1, i0 + tile), m = i1 - i0, n = s.past + i1 - k0;
          // scores (m, n) = Q̃ (m, HD) · K̃ᵀ (HD, n), then scaled and softmaxed
          product(m, n, HD, qr + (b * s.T + i0) * q_stride + h * HD, q_stride, false, kb, kv_stride,
                  true, scores, n, false);
          scaled_softmax(scores, m, n, scale, s.past, i0, k0, key_valid, b, s.Smax);
          round_tile(pr, scores, m * n);
          // out (m, HD) = P̃ (m, n) · Ṽ (n, HD)
          product(m, HD, n, pr, n, false, vb, kv_stride, false,
                  out + (b * s.T + i0) * q_stride + h * HD, q_stride, false);
        }
        r0 = r1;
      }
    }
  }
}

template <typename E>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const uint8_t* key_valid, const int64_t* seg_start,
              const AttentionShape& s) {
  const int64_t T = s.T, HD = s.HD, group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int64_t q_stride = s.NH * HD, kv_stride = s.NKV * HD;
  // dK, dV per query head, summed per group afterwards, as the fp32 backward (attention_grads.h).
  const bool direct = group == 1;
  const size_t head_elems = direct ? 0 : static_cast<size_t>(s.B * T * q_stride);
  float* dk_heads = detail::head_scratch(0, head_elems);  // (B, T, NH, HD) when group > 1
  float* dv_heads = detail::head_scratch(1, head_elems);
  E* qr = buffer<E>(kQ, s.B * T * q_stride);   // (B, T, NH, HD)
  E* kr = buffer<E>(kK, s.B * T * kv_stride);  // (B, T, NKV, HD)
  E* vr = buffer<E>(kV, s.B * T * kv_stride);
  E* dor = buffer<E>(kDout, s.B * T * q_stride);  // (B, T, NH, HD)
  const int64_t M = detail::longest_segment(seg_start, s.B, T);
  const int64_t tile = std::min(M, detail::kQueryTile);
#pragma omp parallel
  {
    round_rows(qr, q, s.B, T, T, q_stride);
    round_rows(kr, k, s.B, T, s.Smax, kv_stride);
    round_rows(vr, v, s.B, T, s.Smax, kv_stride);
    round_rows(dor, dout, s.B, T, T, q_stride);
    float* P = buffer<float>(kTileP, tile * M);    // (tile, n) probabilities
    float* dP = buffer<float>(kTileDp, tile * M);  // (tile, n)
    E* pr = buffer<E>(kTileRounded, tile * M);     // P, then dS, rounded
#pragma omp for schedule(static)
    for (int64_t task = 0; task < s.B * s.NH; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      for (int64_t r0 = 0; r0 < T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, T, r0), m = r1 - r0;
        const E* kb = kr + (b * T + r0) * kv_stride + g * HD;  // (m, HD), row stride kv_stride
        const E* vb = vr + (b * T + r0) * kv_stride + g * HD;
        float* dkh = direct ? dk + (b * s.Smax + r0) * kv_stride + g * HD
                            : dk_heads + (b * T + r0) * q_stride + h * HD;
        float* dvh = direct ? dv + (b * s.Smax + r0) * kv_stride + g * HD
                            : dv_heads + (b * T + r0) * q_stride + h * HD;
        const int64_t ldh = direct ? kv_stride : q_stride;
        // Query tiles last to first: the last sees every key of the block, so its dK, dV products
        // write all m rows and the earlier tiles add into them (no zeroing pass).
        for (int64_t i0 = (m - 1) / tile * tile; i0 >= 0; i0 -= tile) {
          const int64_t i1 = std::min(m, i0 + tile), mt = i1 - i0, n = i1;
          const bool add = i1 < m;  // dK, dV rows [0, n) written by a later tile already
          const E* qb =
              qr + (b * T + r0 + i0) * q_stride + h * HD;  // (mt, HD), row stride q_stride
          const E* dob = dor + (b * T + r0 + i0) * q_stride + h * HD;
          // P (mt, n), recomputed as the forward computes it
          product(mt, n, HD, qb, q_stride, false, kb, kv_stride, true, P, n, false);
          scaled_softmax(P, mt, n, scale, 0, r0 + i0, r0, key_valid, b, s.Smax);
          round_tile(pr, P, mt * n);
          // dV_h[0:n] (n, HD) += P̃ᵀ (n, mt) · dÕ (mt, HD)
          product(n, HD, mt, pr, n, true, dob, q_stride, false, dvh, ldh, add);
          // dP (mt, n) = dÕ (mt, HD) · Ṽᵀ (HD, n)
          product(mt, n, HD, dob, q_stride, false, vb, kv_stride, true, dP, n, false);
          // dS = P ⊙ (dP − D)·scale, rounded: D in double as the fp32 backward, zero right of
          // the diagonal (where P is zero).
          for (int64_t i = 0; i < mt; ++i) {
            const float* prow = P + i * n;
            const float* dprow = dP + i * n;
            E* ds = pr + i * n;
            const int64_t lim = i0 + i + 1;
            const float Df = static_cast<float>(detail::dot_f64(prow, dprow, lim));
            for (int64_t c = 0; c < lim; ++c) put(ds[c], prow[c] * (dprow[c] - Df) * scale);
            std::fill(ds + lim, ds + n, E{0});
          }
          // dQ_h (mt, HD) = dS̃ (mt, n) · K̃ (n, HD)
          product(mt, HD, n, pr, n, false, kb, kv_stride, false,
                  dq + (b * T + r0 + i0) * q_stride + h * HD, q_stride, false);
          // dK_h[0:n] (n, HD) += dS̃ᵀ (n, mt) · Q̃ (mt, HD)
          product(n, HD, mt, pr, n, true, qb, q_stride, false, dkh, ldh, add);
        }
        r0 = r1;
      }
    }
  }
  detail::finish_kv_grads(dk, dv, dk_heads, dv_heads, s);
}

}  // namespace

void attention_forward_bf16(float* out, const float* q, const float* k, const float* v,
                            const uint8_t* key_valid, const int64_t* seg_start,
                            const AttentionShape& s, Bf16Kernel kernel) {
  detail::check_segments(seg_start, s, "attention_forward_bf16");
  if (kernel == Bf16Kernel::kOneDnn)
    forward<uint16_t>(out, q, k, v, key_valid, seg_start, s);
  else
    forward<float>(out, q, k, v, key_valid, seg_start, s);
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const uint8_t* key_valid,
                             const int64_t* seg_start, const AttentionShape& s, Bf16Kernel kernel) {
  detail::check_training_shape(s);
  detail::check_segments(seg_start, s, "attention_backward_bf16");
  if (kernel == Bf16Kernel::kOneDnn)
    backward<uint16_t>(dq, dk, dv, dout, q, k, v, key_valid, seg_start, s);
  else
    backward<float>(dq, dk, dv, dout, q, k, v, key_valid, seg_start, s);
}

}  // namespace medtune::ops
