// Causal grouped-query attention on the CPU.
// Fast path: per (batch row, head), per segment (the whole row, or one example of a packed
// row) and per tile of kQueryTile queries, scores = Q K^T with BLAS into a (tile, n) scratch
// over the keys up to the tile's last query only (causal: about half the T x T products are
// skipped), masked softmax, out = P V with BLAS.
// The scratch is per thread, (T, S) or a packed row's longest example squared; on the CPU it is small next to the KV cache
// (T = S = 2048 is 16 MiB), so no flash-style tiling is needed here. A packed row's examples are
// separate blocks, so the scores between examples (all masked) are never computed.
// Decode path (at most 4 queries per row after a cache, head_dim 64 or 128): the same math with
// AVX2 loops instead of BLAS, whose small-matrix kernels were slow on these 1 x n products
// (BENCHMARKS.md: Q8_0 decode at 256-320 cached positions, 1.12x).
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/attention_mask.h"
#include "ops/ops.h"

namespace medtune::ops {

using detail::visible;

namespace ref {
void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  detail::check_segments(seg_start, s, "attention_forward");
  const int64_t group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  std::vector<double> w(static_cast<size_t>(s.past + s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t p = s.past + t, g = h / group, lo = detail::segment_lo(seg_start, b, s.T, t);
        const float* qv = q + ((b * s.T + t) * s.NH + h) * s.HD;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
          const float* kv = k + ((b * s.Smax + j) * s.NKV + g) * s.HD;
          double dot = 0;
          for (int64_t d = 0; d < s.HD; ++d) dot += static_cast<double>(qv[d]) * static_cast<double>(kv[d]);
          w[static_cast<size_t>(j)] = dot * scale;
          mx = std::fmax(mx, w[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
          w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - mx);
          sum += w[static_cast<size_t>(j)];
        }
        float* o = out + ((b * s.T + t) * s.NH + h) * s.HD;
        for (int64_t d = 0; d < s.HD; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j) {
            if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
            acc += w[static_cast<size_t>(j)] * static_cast<double>(v[((b * s.Smax + j) * s.NKV + g) * s.HD + d]);
          }
          o[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
}
}  // namespace ref

namespace {

// Queries per row at or below which attention_forward takes the decode path: OpenBLAS's
// small-matrix kernels, two calls per (head, query) for 1 x HD by HD x n products, were ~14% of a
// Q8_0 int8 decode step's CPU time at 256-320 cached positions.
constexpr int64_t kDecodeMaxQueries = 4;

// The scores of one query against keys [0, n): scores[j] = scale * (q . K_j), HD = 8 * C. Four keys
// at a time with independent accumulators, so that their rows' loads overlap; each key's dot is
// the same fixed tree of adds wherever it falls (a lone key's zero partners add exact zeros).
template <int C>
void decode_scores(float* scores, const float* qv, const float* kb, int64_t kv_stride, int64_t n, float scale) {
  __m256 q[C];
  for (int c = 0; c < C; ++c) q[c] = _mm256_loadu_ps(qv + 8 * c);
  const __m128 sc = _mm_set1_ps(scale);
  // [dot(a0), dot(a1), dot(a2), dot(a3)] of four 8-lane partial sums.
  const auto reduce4 = [](__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  };
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = kb + j * kv_stride;
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(q[c], _mm256_loadu_ps(k0 + r * kv_stride + 8 * c), a[r]);
    _mm_storeu_ps(scores + j, _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), sc));
  }
  for (; j < n; ++j) {
    __m256 a = _mm256_setzero_ps();
    for (int c = 0; c < C; ++c) a = _mm256_fmadd_ps(q[c], _mm256_loadu_ps(kb + j * kv_stride + 8 * c), a);
    const __m256 z = _mm256_setzero_ps();
    scores[j] = _mm_cvtss_f32(_mm_mul_ps(reduce4(a, z, z, z), sc));
  }
}

// o (HD = 8 * C) = sum over keys j < n of p[j] * V_j, key by key in order, in registers.
template <int C>
void decode_weighted_values(float* o, const float* p, const float* vb, int64_t kv_stride, int64_t n) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (p[j] == 0.0f) continue;  // hidden keys (padding) and underflowed weights
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vj = vb + j * kv_stride;
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
}

// Few queries per row, no packing (decode, or a short chunk after a cache), head_dim 64 or 128
// (C = 8 or 16): per (row, head) and query, the scores against each cached key, softmax, then the
// weighted sum of the value rows. No BLAS call.
template <int C>
void attention_forward_decode(float* out, const float* q, const float* k, const float* v,
                              const uint8_t* key_valid, const AttentionShape& s) {
  const int64_t group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t q_stride = s.NH * s.HD, kv_stride = s.NKV * s.HD, n_max = s.past + s.T;
  const int64_t tasks = s.B * s.NH;
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(n_max));  // (n) of one query
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      const float* kb = k + b * s.Smax * kv_stride + g * s.HD;  // key j at kb + j * kv_stride
      const float* vb = v + b * s.Smax * kv_stride + g * s.HD;
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t p = s.past + t, n = p + 1;  // keys 0 .. p
        decode_scores<C>(scores.data(), q + (b * s.T + t) * q_stride + h * s.HD, kb, kv_stride, n, scale);
        detail::softmax_visible_row(scores.data(), n, n, key_valid, b, s.Smax, 0, p);
        decode_weighted_values<C>(out + (b * s.T + t) * q_stride + h * s.HD, scores.data(), vb, kv_stride, n);
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  detail::check_segments(seg_start, s, "attention_forward");
  if (seg_start == nullptr && s.T <= kDecodeMaxQueries && s.HD == 64)
    return attention_forward_decode<8>(out, q, k, v, key_valid, s);
  if (seg_start == nullptr && s.T <= kDecodeMaxQueries && s.HD == 128)
    return attention_forward_decode<16>(out, q, k, v, key_valid, s);
  const int64_t group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t q_stride = s.NH * s.HD, kv_stride = s.NKV * s.HD;
  const int64_t tasks = s.B * s.NH;
  const int64_t M = detail::longest_segment(seg_start, s.B, s.T);  // T without packing
  const int64_t tile = std::min(M, detail::kQueryTile);
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(tile * (s.past + M)));  // (tile, n) of the largest block
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      // Block: queries [r0, r1) (absolute positions past + t) against keys [k0, past + r1): the
      // whole row without packing (k0 = 0), one example with it (k0 = r0, past = 0).
      for (int64_t r0 = 0; r0 < s.T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, s.T, r0);
        const int64_t k0 = seg_start == nullptr ? 0 : r0;
        const float* kb = k + (b * s.Smax + k0) * kv_stride + g * s.HD;
        const float* vb = v + (b * s.Smax + k0) * kv_stride + g * s.HD;
        // Query tiles [i0, i1) of the block see keys [k0, past + i1) only (causal): the scores
        // right of the diagonal are never computed.
        for (int64_t i0 = r0; i0 < r1; i0 += tile) {
          const int64_t i1 = std::min(r1, i0 + tile), m = i1 - i0, n = s.past + i1 - k0;
          const float* qb = q + (b * s.T + i0) * q_stride + h * s.HD;
          float* ob = out + (b * s.T + i0) * q_stride + h * s.HD;
          // scores (m, n) = scale * Q (m, HD) . K^T (HD, n)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                      static_cast<int>(s.HD), scale, qb, static_cast<int>(q_stride), kb,
                      static_cast<int>(kv_stride), 0.0f, scores.data(), static_cast<int>(n));
          for (int64_t i = 0; i < m; ++i) {
            const int64_t p = s.past + i0 + i;  // absolute query position; keys k0 + c <= p
            detail::softmax_visible_row(scores.data() + i * n, n, p - k0 + 1, key_valid, b, s.Smax, k0, p);
          }
          // out (m, HD) = P (m, n) . V (n, HD)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                      static_cast<int>(s.HD), static_cast<int>(n), 1.0f, scores.data(),
                      static_cast<int>(n), vb, static_cast<int>(kv_stride), 0.0f, ob,
                      static_cast<int>(q_stride));
        }
        r0 = r1;
      }
    }
  }
}

}  // namespace medtune::ops
