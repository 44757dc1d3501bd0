// Training's loss head at bf16 over vocabulary tiles (ops/lm_head_loss.h: the derivation and the
// numerics).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/bf16_rows.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/cpu/row_loss.h"
#include "ops/cpu/vec_exp.h"
#include "ops/lm_head_loss.h"

namespace medtune::ops {

namespace {

// Logits of one tile at most (2 MiB of fp32, a core's L2 on the Intel host it was tuned on; 1 MiB
// on Zen 4): 2048 words of the vocabulary for 256 rows. A scratch prototype of this loop (SmolLM2's
// head, 2 x 256 rows, 2 threads) took 118-122 ms with 2048 words a tile, 125-131 ms with 1024 and
// 145-157 ms with 512.
constexpr int64_t kTileElems = int64_t{1} << 19;

int64_t tile_words(int64_t n, int64_t V) {
  const int64_t words = std::max<int64_t>(64, kTileElems / std::max<int64_t>(1, n)) / 64 * 64;
  return std::min(words, V);
}

// The calling thread's buffers, kept between calls (one loss head chunk after another).
struct Scratch {
  std::vector<uint16_t> h16, p16, w16;  // oneDNN: bf16 operands
  std::vector<float> h32, p32, w32;     // widened SGEMM: the same values as fp32
  std::vector<float> z;                 // (n, tile) logits, then their exps
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

LossSum lm_head_loss_backward_bf16(float* dh, const float* h, const StoredMatrix& w,
                                   const int64_t* targets, int64_t n, float scale, Bf16Kernel k) {
  const int64_t V = w.rows, C = w.cols;
  if (n <= 0) return {};
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] >= V)
      throw Internal("lm_head_loss_backward_bf16: target " + std::to_string(targets[i]) +
                     " >= vocabulary " + std::to_string(V));
  const bool native = k == Bf16Kernel::kOneDnn;
  const int64_t tile = tile_words(n, V);
  Scratch& s = scratch();
  if (native) {
    s.h16.resize(static_cast<size_t>(n * C));
    detail::round_to_bf16(s.h16.data(), h, n * C);  // (n, C)
    s.p16.resize(static_cast<size_t>(n * tile));    // (n, tile)
  } else {
    s.h32.resize(static_cast<size_t>(n * C));
    detail::round_all_through_bf16(s.h32.data(), h, n * C);  // (n, C)
    s.p32.resize(static_cast<size_t>(n * tile));             // (n, tile)
  }
  s.z.resize(static_cast<size_t>(n * tile));  // (n, tile)
  // Per row: the running max of its logits, the sum of exp(logit - max) in double, its target's
  // logit.
  std::vector<float> mx(static_cast<size_t>(n), 0.0f);
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  std::vector<float> zy(static_cast<size_t>(n), 0.0f);

  for (int64_t v0 = 0; v0 < V; v0 += tile) {
    const int64_t vt = std::min(tile, V - v0);
    const bool first = v0 == 0;
    const int vti = static_cast<int>(vt), Ci = static_cast<int>(C), ni = static_cast<int>(n);
    // z (n, vt) = h (n, C) . W[v0 : v0 + vt]^T
    const uint16_t* wb = nullptr;  // (vt, C)
    const float* wf = nullptr;     // (vt, C)
    if (native) {
      wb = detail::weight_rows_bf16(w, v0, v0 + vt, s.w16);
      onednn::matmul_bf16(n, vt, C, s.h16.data(), C, wb, C, /*b_rows_are_n=*/true, s.z.data(), vt,
                          false);
    } else {
      wf = detail::weight_rows_rounded(w, v0, v0 + vt, s.w32);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, vti, Ci, 1.0f, s.h32.data(), Ci, wf,
                  Ci, 0.0f, s.z.data(), vti);
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* z = s.z.data() + i * vt;
      const int64_t y = targets[i];
      if (y >= v0 && y < v0 + vt) zy[static_cast<size_t>(i)] = z[y - v0];
      const float m = detail::row_max(z, vt, z[0]);
      float& row_max = mx[static_cast<size_t>(i)];
      if (first) {
        row_max = m;
      } else if (m > row_max) {
        // The max grew: what was summed and accumulated against the old one is rescaled.
        const float f = detail::exp1(row_max - m);
        sum[static_cast<size_t>(i)] *= static_cast<double>(f);
        float* acc = dh + i * C;
        for (int64_t c = 0; c < C; ++c) acc[c] *= f;
        row_max = m;
      }
      sum[static_cast<size_t>(i)] += detail::exp_shifted_sum_f64(z, z, vt, row_max);
    }
    // P (n, vt) = the exps rounded to bf16, the second product's operand.
    if (native) detail::round_to_bf16(s.p16.data(), s.z.data(), n * vt);
    else detail::round_all_through_bf16(s.p32.data(), s.z.data(), n * vt);
    // acc (n, C) (+)= P (n, vt) . W[v0 : v0 + vt]
    if (native)
      onednn::matmul_bf16(n, C, vt, s.p16.data(), vt, wb, C, /*b_rows_are_n=*/false, dh, C, !first);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, Ci, vti, 1.0f, s.p32.data(), vti,
                  wf, Ci, first ? 0.0f : 1.0f, dh, Ci);
  }

  // dh_n = acc_n * scale / sum_n - scale * W[y_n]; loss_n = max + log(sum) - z[y_n].
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
#pragma omp parallel
  {
    // W[y], dequantized here and rounded through bf16 below, as the products read it.
    std::vector<float> wy(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* d = dh + i * C;
      const int64_t y = targets[i];
      if (y < 0) {
        std::fill(d, d + C, 0.0f);
        continue;
      }
      const double total = sum[static_cast<size_t>(i)];
      row_loss[static_cast<size_t>(i)] = static_cast<double>(mx[static_cast<size_t>(i)]) +
                                         std::log(total) -
                                         static_cast<double>(zy[static_cast<size_t>(i)]);
      dequantize_rows(wy.data(), w, y, y + 1);
      const float kf = static_cast<float>(static_cast<double>(scale) / total);
      for (int64_t c = 0; c < C; ++c)
        d[c] = d[c] * kf - scale * round_through_bf16(wy[static_cast<size_t>(c)]);
    }
  }
  return detail::sum_target_rows(row_loss, targets, n);
}

}  // namespace medtune::ops
