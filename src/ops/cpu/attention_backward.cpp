// Causal grouped-query attention backward, training case (no KV history: past = 0, S = T).
//
// Derivation for one (b, query head h), kv head g = h / group, scale = 1/sqrt(HD):
//   S = scale·Q·Kᵀ (T, T), masked entries −inf;   P = softmax_rows(S);   O = P·V
//   dV = Pᵀ·dO                                     (O is linear in V)
//   dP = dO·Vᵀ
//   softmax Jacobian per row: dS_tj = P_tj·(dP_tj − Σ_i P_ti·dP_ti) = P_tj·(dP_tj − D_t)
//     D_t = Σ_i P_ti·dP_ti = dO_t·(Σ_i P_ti·v_i) = dO_t·O_t, computed from P and dP so that O
//     need not be saved or passed in
//   S = scale·Q·Kᵀ  ⇒  dQ = scale·dS·K,   dK = scale·dSᵀ·Q
// (the code folds scale into dS). Masked entries have P = 0, hence dS = 0: padded keys receive
// nothing, and a query with no visible key (P row all zero, output zero) has dQ = 0.
// GQA: kv head g is read by query heads [g·group, (g+1)·group), so dK_g, dV_g sum over them.
// Causal tiling: queries go by tiles of kQueryTile; a tile's P, dP, dS span only the keys up to
// its last query, and dK, dV sum the tiles' contributions, last tile first (deterministic).
// Packed rows (seg_start): the mask is block-diagonal, so each example's block [r0, r1) is the
// same computation on its own queries and keys; its keys get gradient from its queries only.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"
#include "ops/cpu/attention_grads.h"
#include "ops/cpu/attention_mask.h"

namespace medtune::ops {

using detail::visible;

namespace detail {
void check_training_shape(const AttentionShape& s) {
  if (s.past != 0)
    throw Internal("attention_backward: past = " + std::to_string(s.past) +
                   ", but the backward supports only training (past = 0)");
  if (s.Smax < s.T || s.NKV <= 0 || s.NH % s.NKV != 0)
    throw Internal("attention_backward: bad shape T = " + std::to_string(s.T) + ", Smax = " +
                   std::to_string(s.Smax) + ", NH = " + std::to_string(s.NH) +
                   ", NKV = " + std::to_string(s.NKV));
}
float* head_scratch(int which, size_t n) {
  thread_local std::vector<float> bufs[2];
  std::vector<float>& b = bufs[which];
  if (b.size() < n) b.resize(n);
  return b.data();
}

void finish_kv_grads(float* dk, float* dv, const float* dk_heads, const float* dv_heads,
                     const AttentionShape& s) {
  const int64_t T = s.T, HD = s.HD, group = s.NH / s.NKV;
  const int64_t q_stride = s.NH * HD, kv_stride = s.NKV * HD;
  const int64_t rows = s.B * s.Smax;
#pragma omp parallel for schedule(static) if (rows * kv_stride > 65536)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / s.Smax, j = row % s.Smax;
    float* dkr = dk + row * kv_stride;  // (NKV, HD)
    float* dvr = dv + row * kv_stride;
    if (j >= T) {
      std::fill(dkr, dkr + kv_stride, 0.0f);
      std::fill(dvr, dvr + kv_stride, 0.0f);
      continue;
    }
    if (group == 1) continue;
    const float* dks = dk_heads + (b * T + j) * q_stride;  // (NH, HD)
    const float* dvs = dv_heads + (b * T + j) * q_stride;
    for (int64_t g = 0; g < s.NKV; ++g)
      for (int64_t d = 0; d < HD; ++d) {
        float ak = 0, av = 0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          ak += dks[h * HD + d];
          av += dvs[h * HD + d];
        }
        dkr[g * HD + d] = ak;
        dvr[g * HD + d] = av;
      }
  }
}
}  // namespace detail

using detail::check_training_shape;
using detail::head_scratch;

namespace ref {
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  check_training_shape(s);
  detail::check_segments(seg_start, s, "attention_backward");
  const int64_t group = s.NH / s.NKV, HD = s.HD;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  const auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * s.T + t) * s.NH + h) * HD; };
  const auto ki = [&](int64_t b, int64_t j, int64_t g) { return ((b * s.Smax + j) * s.NKV + g) * HD; };
  // dk, dv accumulate over query heads and positions: in double, rounded once at the end.
  const size_t kv_size = static_cast<size_t>(s.B * s.Smax * s.NKV * HD);
  std::vector<double> dk_acc(kv_size, 0.0), dv_acc(kv_size, 0.0);
  std::vector<double> p(static_cast<size_t>(s.T)), dp(static_cast<size_t>(s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t g = h / group, lo = detail::segment_lo(seg_start, b, s.T, t);
        const T* qv = q + qi(b, t, h);
        const T* dov = dout + qi(b, t, h);
        // P row, as the forward: softmax over visible keys, all zero when none is visible.
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          p[static_cast<size_t>(j)] = 0;
          if (!visible(key_valid, b, s.Smax, j, lo, t)) continue;
          double dot = 0;
          for (int64_t d = 0; d < HD; ++d)
            dot += static_cast<double>(qv[d]) * static_cast<double>(k[ki(b, j, g) + d]);
          p[static_cast<size_t>(j)] = dot * scale;
          mx = std::fmax(mx, p[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          if (!visible(key_valid, b, s.Smax, j, lo, t)) continue;
          p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
          sum += p[static_cast<size_t>(j)];
        }
        // dP_j = dO·v_j and D = Σ_j P_j·dP_j.
        double D = 0;
        for (int64_t j = 0; j <= t; ++j) {
          if (sum > 0) p[static_cast<size_t>(j)] /= sum;
          double dot = 0;
          for (int64_t d = 0; d < HD; ++d)
            dot += static_cast<double>(dov[d]) * static_cast<double>(v[ki(b, j, g) + d]);
          dp[static_cast<size_t>(j)] = dot;
          D += p[static_cast<size_t>(j)] * dot;
        }
        T* dqv = dq + qi(b, t, h);
        std::vector<double> dq_acc(static_cast<size_t>(HD), 0.0);
        for (int64_t j = 0; j <= t; ++j) {
          const double pj = p[static_cast<size_t>(j)];
          const double ds = pj * (dp[static_cast<size_t>(j)] - D) * scale;
          for (int64_t d = 0; d < HD; ++d) {
            dq_acc[static_cast<size_t>(d)] += ds * static_cast<double>(k[ki(b, j, g) + d]);
            dk_acc[static_cast<size_t>(ki(b, j, g) + d)] += ds * static_cast<double>(qv[d]);
            dv_acc[static_cast<size_t>(ki(b, j, g) + d)] += pj * static_cast<double>(dov[d]);
          }
        }
        for (int64_t d = 0; d < HD; ++d) dqv[d] = static_cast<T>(dq_acc[static_cast<size_t>(d)]);
      }
  for (size_t i = 0; i < kv_size; ++i) {
    dk[i] = static_cast<T>(dk_acc[i]);
    dv[i] = static_cast<T>(dv_acc[i]);
  }
}
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const uint8_t*,
                                        const int64_t*, const AttentionShape&);
template void attention_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const uint8_t*,
                                         const int64_t*, const AttentionShape&);
}  // namespace ref

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const uint8_t* key_valid,
                        const int64_t* seg_start, const AttentionShape& s) {
  check_training_shape(s);
  detail::check_segments(seg_start, s, "attention_backward");
  const int64_t T = s.T, HD = s.HD, group = s.NH / s.NKV;
  const int HDi = static_cast<int>(HD);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int64_t q_stride = s.NH * HD, kv_stride = s.NKV * HD;
  const int qs = static_cast<int>(q_stride), kvs = static_cast<int>(kv_stride);
  // One task per (b, query head), as the forward: B·NH tasks keep every core busy even at B = 1
  // (one task per kv head would leave SmolLM2's B·3 tasks for all cores). With GQA several
  // heads feed one dK_g, dV_g; rather than atomics, each head writes its own slice of a
  // (B, T, NH, HD) scratch and a second pass sums each group in head order: deterministic, and
  // the sum costs O(T·NH·HD), nothing next to the O(T²·NH·HD) GEMMs. MHA writes dk, dv directly.
  const bool direct = group == 1;
  const size_t head_elems = direct ? 0 : static_cast<size_t>(s.B * T * q_stride);
  float* dk_heads = head_scratch(0, head_elems);  // (B, T, NH, HD) when group > 1
  float* dv_heads = head_scratch(1, head_elems);
  const int64_t tasks = s.B * s.NH;
  const int64_t M = detail::longest_segment(seg_start, s.B, T);  // T without packing
  const int64_t tile = std::min(M, detail::kQueryTile);
#pragma omp parallel
  {
    std::vector<float> P(static_cast<size_t>(tile * M));   // (tile, n) probabilities, then dS
    std::vector<float> dP(static_cast<size_t>(tile * M));  // (tile, n)
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      // Block [r0, r1): the whole row, or one example of a packed row (queries and keys alike).
      // The blocks tile the row, so every key row of dk, dv is written by exactly one block.
      for (int64_t r0 = 0; r0 < T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, T, r0), m = r1 - r0;
        const float* kb = k + (b * s.Smax + r0) * kv_stride + g * HD;  // (m, HD), row stride kv_stride
        const float* vb = v + (b * s.Smax + r0) * kv_stride + g * HD;
        // This head's dK, dV (m, HD): straight into dk, dv (MHA) or into its scratch slice.
        float* dkh = direct ? dk + (b * s.Smax + r0) * kv_stride + g * HD
                            : dk_heads + (b * T + r0) * q_stride + h * HD;
        float* dvh = direct ? dv + (b * s.Smax + r0) * kv_stride + g * HD
                            : dv_heads + (b * T + r0) * q_stride + h * HD;
        const int64_t ldh = direct ? kv_stride : q_stride;
        const int ldhi = static_cast<int>(ldh);
        // Query tile [i0, i1) (relative to r0) sees keys [0, i1) of the block (causal). Tiles go
        // last to first: the last sees every key of the block, so its dK, dV products write all
        // m rows and the earlier tiles add into them (no zeroing pass).
        for (int64_t i0 = (m - 1) / tile * tile; i0 >= 0; i0 -= tile) {
          const int64_t i1 = std::min(m, i0 + tile), mt = i1 - i0, n = i1;
          const float beta = i1 < m ? 1.0f : 0.0f;  // dK, dV rows [0, n) written by a later tile
          const int mti = static_cast<int>(mt), ni = static_cast<int>(n);
          const float* qb = q + (b * T + r0 + i0) * q_stride + h * HD;  // (mt, HD), row stride q_stride
          const float* dob = dout + (b * T + r0 + i0) * q_stride + h * HD;
          float* dqb = dq + (b * T + r0 + i0) * q_stride + h * HD;
          // P (mt, n) = softmax(scale · Q · Kᵀ), recomputed exactly as the forward's fast path.
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mti, ni, HDi, scale, qb, qs, kb, kvs,
                      0.0f, P.data(), ni);
          for (int64_t i = 0; i < mt; ++i)
            detail::softmax_visible_row(P.data() + i * n, n, i0 + i + 1, key_valid, b, s.Smax, r0, r0 + i0 + i);
          // dV_h[0:n] (n, HD) += Pᵀ (n, mt) · dO (mt, HD)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ni, HDi, mti, 1.0f, P.data(), ni,
                      dob, qs, beta, dvh, ldhi);
          // dP (mt, n) = dO (mt, HD) · Vᵀ (HD, n)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mti, ni, HDi, 1.0f, dob, qs, vb, kvs,
                      0.0f, dP.data(), ni);
          // dS = P ⊙ (dP − D)·scale, in place over P; zero right of the diagonal, where P is.
          // D is summed in double (n adds per row, in partial sums that vectorize) because dP − D
          // cancels where P concentrates on few keys.
          for (int64_t i = 0; i < mt; ++i) {
            float* pr = P.data() + i * n;
            const float* dpr = dP.data() + i * n;
            const int64_t lim = i0 + i + 1;  // keys 0 .. i0 + i are causal-visible
            const float Df = static_cast<float>(detail::dot_f64(pr, dpr, lim));
            for (int64_t c = 0; c < lim; ++c) pr[c] = pr[c] * (dpr[c] - Df) * scale;
          }
          // dQ_h (mt, HD) = dS (mt, n) · K (n, HD)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mti, HDi, ni, 1.0f, P.data(), ni, kb,
                      kvs, 0.0f, dqb, qs);
          // dK_h[0:n] (n, HD) += dSᵀ (n, mt) · Q (mt, HD)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ni, HDi, mti, 1.0f, P.data(), ni, qb,
                      qs, beta, dkh, ldhi);
        }
        r0 = r1;
      }
    }
  }
  // Group sums (in head order) and zeros for the cache rows past T, which the forward never reads.
  detail::finish_kv_grads(dk, dv, dk_heads, dv_heads, s);
}

}  // namespace medtune::ops
