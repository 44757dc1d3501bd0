// Causal grouped-query attention on the CPU.
// Fast path: per (batch row, head), scores = Q K^T with BLAS into a (T, S) scratch, masked softmax,
// out = P V with BLAS. The (T, S) scratch is per thread; on the CPU it is small next to the KV
// cache (T = S = 2048 is 16 MiB), so no flash-style tiling is needed here.
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/ops.h"

namespace medtune::ops {

namespace {
// Key j is visible to the query at absolute position p when j <= p and it is not padding.
inline bool visible(const uint8_t* key_valid, int64_t b, int64_t Smax, int64_t j, int64_t p) {
  return j <= p && (key_valid == nullptr || key_valid[b * Smax + j] != 0);
}
}  // namespace

namespace ref {
void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const AttentionShape& s) {
  const int64_t group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  std::vector<double> w(static_cast<size_t>(s.past + s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t p = s.past + t, g = h / group;
        const float* qv = q + ((b * s.T + t) * s.NH + h) * s.HD;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, p)) continue;
          const float* kv = k + ((b * s.Smax + j) * s.NKV + g) * s.HD;
          double dot = 0;
          for (int64_t d = 0; d < s.HD; ++d) dot += static_cast<double>(qv[d]) * static_cast<double>(kv[d]);
          w[static_cast<size_t>(j)] = dot * scale;
          mx = std::fmax(mx, w[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, p)) continue;
          w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - mx);
          sum += w[static_cast<size_t>(j)];
        }
        float* o = out + ((b * s.T + t) * s.NH + h) * s.HD;
        for (int64_t d = 0; d < s.HD; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j) {
            if (!visible(key_valid, b, s.Smax, j, p)) continue;
            acc += w[static_cast<size_t>(j)] * static_cast<double>(v[((b * s.Smax + j) * s.NKV + g) * s.HD + d]);
          }
          o[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
}
}  // namespace ref

void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const AttentionShape& s) {
  const int64_t S = s.past + s.T;
  const int64_t group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t q_stride = s.NH * s.HD, kv_stride = s.NKV * s.HD;
  const int64_t tasks = s.B * s.NH;
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(s.T * S));  // (T, S) for one (b, h)
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      const float* qb = q + b * s.T * q_stride + h * s.HD;
      const float* kb = k + b * s.Smax * kv_stride + g * s.HD;
      const float* vb = v + b * s.Smax * kv_stride + g * s.HD;
      float* ob = out + b * s.T * q_stride + h * s.HD;
      // scores (T, S) = scale * Q (T, HD) . K^T (HD, S)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.T),
                  static_cast<int>(S), static_cast<int>(s.HD), scale, qb,
                  static_cast<int>(q_stride), kb, static_cast<int>(kv_stride), 0.0f,
                  scores.data(), static_cast<int>(S));
      for (int64_t t = 0; t < s.T; ++t) {
        float* row = scores.data() + t * S;
        const int64_t p = s.past + t;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < S; ++j) {
          if (visible(key_valid, b, s.Smax, j, p)) {
            mx = std::fmax(mx, row[j]);
          } else {
            row[j] = -std::numeric_limits<float>::infinity();
          }
        }
        float sum = 0;
        if (mx != -std::numeric_limits<float>::infinity()) {
          for (int64_t j = 0; j < S; ++j) {
            row[j] = std::exp(row[j] - mx);  // exp(-inf) = 0 for hidden keys
            sum += row[j];
          }
        }
        const float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int64_t j = 0; j < S; ++j) row[j] = sum > 0 ? row[j] * inv : 0.0f;
      }
      // out (T, HD) = P (T, S) . V (S, HD)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.T),
                  static_cast<int>(s.HD), static_cast<int>(S), 1.0f, scores.data(),
                  static_cast<int>(S), vb, static_cast<int>(kv_stride), 0.0f, ob,
                  static_cast<int>(q_stride));
    }
  }
}

}  // namespace medtune::ops
