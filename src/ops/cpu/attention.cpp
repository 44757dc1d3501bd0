// Causal grouped-query attention on the CPU.
// Fast path: per (batch row, head) and per segment (the whole row, or one example of a packed
// row), scores = Q K^T with BLAS into an (m, n) scratch, masked softmax, out = P V with BLAS.
// The scratch is per thread, (T, S) or a packed row's longest example squared; on the CPU it is small next to the KV cache
// (T = S = 2048 is 16 MiB), so no flash-style tiling is needed here. A packed row's examples are
// separate blocks, so the scores between examples (all masked) are never computed.
#include <cblas.h>
#include <omp.h>

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
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(M * (s.past + M)));  // (m, n) of the largest block
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      // Block: queries [r0, r1) (absolute positions past + t) against keys [k0, past + r1): the
      // whole row without packing (k0 = 0), one example with it (k0 = r0, past = 0).
      for (int64_t r0 = 0; r0 < s.T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, s.T, r0);
        const int64_t k0 = seg_start == nullptr ? 0 : r0;
        const int64_t m = r1 - r0, n = s.past + r1 - k0;
        const float* qb = q + (b * s.T + r0) * q_stride + h * s.HD;
        const float* kb = k + (b * s.Smax + k0) * kv_stride + g * s.HD;
        const float* vb = v + (b * s.Smax + k0) * kv_stride + g * s.HD;
        float* ob = out + (b * s.T + r0) * q_stride + h * s.HD;
        // scores (m, n) = scale * Q (m, HD) . K^T (HD, n)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(s.HD), scale, qb, static_cast<int>(q_stride), kb,
                    static_cast<int>(kv_stride), 0.0f, scores.data(), static_cast<int>(n));
        for (int64_t i = 0; i < m; ++i) {
          float* row = scores.data() + i * n;
          const int64_t p = s.past + r0 + i;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t c = 0; c < n; ++c) {
            if (visible(key_valid, b, s.Smax, k0 + c, k0, p)) {
              mx = std::fmax(mx, row[c]);
            } else {
              row[c] = -std::numeric_limits<float>::infinity();
            }
          }
          float sum = 0;
          if (mx != -std::numeric_limits<float>::infinity()) {
            for (int64_t c = 0; c < n; ++c) {
              row[c] = std::exp(row[c] - mx);  // exp(-inf) = 0 for hidden keys
              sum += row[c];
            }
          }
          const float inv = sum > 0 ? 1.0f / sum : 0.0f;
          for (int64_t c = 0; c < n; ++c) row[c] = sum > 0 ? row[c] * inv : 0.0f;
        }
        // out (m, HD) = P (m, n) . V (n, HD)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(s.HD), static_cast<int>(n), 1.0f, scores.data(),
                    static_cast<int>(n), vb, static_cast<int>(kv_stride), 0.0f, ob,
                    static_cast<int>(q_stride));
        r0 = r1;
      }
    }
  }
}

}  // namespace medtune::ops
