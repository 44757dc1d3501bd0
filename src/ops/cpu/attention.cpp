// Causal grouped-query attention on the CPU.
// Fast path: per (batch row, head), per segment (the whole row, or one example of a packed
// row) and per tile of kQueryTile queries, scores = Q K^T with BLAS into a (tile, n) scratch
// over the keys up to the tile's last query only (causal: about half the T x T products are
// skipped), masked softmax, out = P V with BLAS.
// The scratch is per thread, (T, S) or a packed row's longest example squared; on the CPU it is small next to the KV cache
// (T = S = 2048 is 16 MiB), so no flash-style tiling is needed here. A packed row's examples are
// separate blocks, so the scores between examples (all masked) are never computed.
#include <cblas.h>
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

void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  detail::check_segments(seg_start, s, "attention_forward");
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
