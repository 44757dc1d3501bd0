// Batch-invariant products for the server's continuous batching (ops/linear.h).
//
// Why not OpenBLAS: its sgemm gives a row of the result that depends on how many rows are in the
// product (the M edge kernels and the thread split differ: measured with OpenBLAS 0.3.21 on Zen 3,
// 576 x 1536 weights, up to 3e-5 apart between M = 1 and M = 64), and linear_forward picks a fused
// dequantize-and-dot path for N <= 4 and SGEMM above. A request's logits would then depend on how
// many other requests shared its forward pass. Here every output element is one fixed-order dot
// product, whatever N, the blocking or the thread count:
//   acc[j] = fma(w[k], x[k], acc[j]) for k = j, j + 8, j + 16, ... (8 lanes, k ascending),
//   result = ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7)).
// The AVX2 path and the scalar fallback compute exactly that (vfmadd is one fma per lane).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/linear.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace medtune::ops {

namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kRowBlock = 16;   // weight rows dequantized at a time, per thread (16 x K floats)
constexpr int64_t kTokenBlock = 64; // rows of x multiplied with one dequantized block (kept in L2)

float reduce_lanes(const float* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// Lanes of acc += the part of w . x that is not a multiple of 8 long, per lane as the vector loop.
void tail(float* acc, const float* w, const float* x, int64_t k0, int64_t K) {
  for (int64_t k = k0; k < K; ++k) acc[k - k0] = std::fma(w[k], x[k], acc[k - k0]);
}

// out[j * wstride + i * out_stride] = dot(w_j, x_i) for `nw` (1..2) weight rows w_j (stride K)
// and `m` (1..4) rows x_i (stride K), each element in the fixed order above: up to 8 independent
// accumulators, so that a loaded weight vector serves 4 tokens and a loaded x vector 2 rows.
template <int m>
void dot_tile(float* out, int64_t out_stride, const float* w, int nw, const float* const* x, int64_t K) {
  const int64_t K8 = K / kLanes * kLanes;
  alignas(32) float acc[2][4][kLanes] = {};
#if defined(__AVX2__) && defined(__FMA__)
  __m256 a[2][4];
  for (auto& row : a)
    for (auto& v : row) v = _mm256_setzero_ps();
  const float* w1 = nw > 1 ? w + K : w;
  for (int64_t k = 0; k < K8; k += kLanes) {
    const __m256 w0v = _mm256_loadu_ps(w + k), w1v = _mm256_loadu_ps(w1 + k);
    for (int i = 0; i < m; ++i) {  // m is a constant: unrolled
      const __m256 xv = _mm256_loadu_ps(x[i] + k);
      a[0][i] = _mm256_fmadd_ps(w0v, xv, a[0][i]);
      a[1][i] = _mm256_fmadd_ps(w1v, xv, a[1][i]);
    }
  }
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 4; ++i) _mm256_store_ps(acc[j][i], a[j][i]);
#else
  for (int j = 0; j < nw; ++j)
    for (int i = 0; i < m; ++i)
      for (int64_t k = 0; k < K8; ++k) acc[j][i][k % kLanes] = std::fma(w[j * K + k], x[i][k], acc[j][i][k % kLanes]);
#endif
  for (int j = 0; j < nw; ++j)
    for (int i = 0; i < m; ++i) {
      tail(acc[j][i], w + j * K, x[i], K8, K);
      out[j + i * out_stride] = reduce_lanes(acc[j][i]);
    }
}

// y[n, r] = dot(W_r, x_n) for n in [n0, n1), r in [r0, r1); W rows in `wrows` ((r1 - r0), K).
void block(float* y, int64_t ldy, const float* x, const float* wrows, int64_t n0, int64_t n1, int64_t r0,
           int64_t r1, int64_t K) {
  for (int64_t n = n0; n < n1; n += 4) {
    const int m = static_cast<int>(std::min<int64_t>(4, n1 - n));
    const float* xs[4] = {};
    for (int i = 0; i < m; ++i) xs[i] = x + (n + i) * K;
    for (int64_t r = r0; r < r1; r += 2) {
      float* out = y + n * ldy + r;
      const float* w = wrows + (r - r0) * K;
      const int nw = static_cast<int>(std::min<int64_t>(2, r1 - r));
      switch (m) {
        case 1: dot_tile<1>(out, ldy, w, nw, xs, K); break;
        case 2: dot_tile<2>(out, ldy, w, nw, xs, K); break;
        case 3: dot_tile<3>(out, ldy, w, nw, xs, K); break;
        default: dot_tile<4>(out, ldy, w, nw, xs, K); break;
      }
    }
  }
}

}  // namespace

void linear_forward_batch_invariant(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  const int64_t K = w.cols, R = w.rows;
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
#pragma omp parallel
  {
    std::vector<float> wrows;
    if (w.dtype != DType::F32) wrows.resize(static_cast<size_t>(kRowBlock * K));
    for (int64_t n0 = 0; n0 < N; n0 += kTokenBlock) {
      const int64_t n1 = std::min(N, n0 + kTokenBlock);
#pragma omp for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t r0 = b * kRowBlock, r1 = std::min(R, r0 + kRowBlock);
        const float* rows = reinterpret_cast<const float*>(w.row(r0));
        if (w.dtype != DType::F32) {
          dequantize_rows(wrows.data(), w, r0, r1);
          rows = wrows.data();
        }
        block(y, R, x, rows, n0, n1, r0, r1, K);
      }
    }
  }
  if (bias != nullptr)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < R; ++r) y[n * R + r] += bias[r];
}

void gemm_batch_invariant(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // C[i, j] = alpha * dot(row i of op(A), column j of op(B)) (+ beta C): both vectors made
  // contiguous (op(A)'s rows, op(B)^T's rows), then one fixed-order dot each.
  std::vector<float> a(static_cast<size_t>(M * K)), bt(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) a[static_cast<size_t>(i * K + k)] = trans_a ? A[k * lda + i] : A[i * lda + k];
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) bt[static_cast<size_t>(j * K + k)] = trans_b ? B[j * ldb + k] : B[k * ldb + j];
  std::vector<float> dots(static_cast<size_t>(M * N));  // (M, N)
  block(dots.data(), N, a.data(), bt.data(), 0, M, 0, N, K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float d = alpha * dots[static_cast<size_t>(i * N + j)];
      C[i * ldc + j] = beta == 0.0f ? d : d + beta * C[i * ldc + j];
    }
}

}  // namespace medtune::ops
