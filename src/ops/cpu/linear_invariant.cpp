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

#include "core/quant.h"
#include "ops/cpu/balanced_blocks.h"
#include "ops/linear.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace medtune::ops {

namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kRowBlock = 16;  // weight rows dequantized at a time, per thread (16 x K floats)
constexpr int64_t kTokenBlock = 64; // rows of x multiplied with one dequantized block (kept in L2)
// Tokens up to which quantized rows are decoded in registers for every 4 tokens rather than once
// into a buffer for up to 64 (forward_decoded_in_registers).
constexpr int64_t kRegisterDecodeMaxTokens = 16;

float reduce_lanes(const float* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// Lanes of acc += the part of w . x that is not a multiple of 8 long, per lane as the vector loop.
void tail(float* acc, const float* w, const float* x, int64_t k0, int64_t K) {
  for (int64_t k = k0; k < K; ++k) acc[k - k0] = std::fma(w[k], x[k], acc[k - k0]);
}

// out[j + i * out_stride] = dot(w_j, x_i) for `nw` (1..NW) weight rows w_j (stride K) and M rows
// x_i, each element in the fixed order above. One accumulator per (row, token) is one dependency
// chain of K/8 FMAs, so a tile needs about 8 of them to keep both FMA pipes busy: NW x M is 8 x 1
// for a single token (decode), 4 x 2, 2 x 3 and 2 x 4 for more. A loaded weight vector serves M
// tokens and a loaded x vector NW rows.
template <int NW, int M>
void dot_tile(float* out, int64_t out_stride, const float* w, int nw, const float* const* x, int64_t K) {
  const int64_t K8 = K / kLanes * kLanes;
  alignas(32) float acc[NW][M][kLanes] = {};
  const float* wr[NW];
  for (int j = 0; j < NW; ++j) wr[j] = w + std::min(j, nw - 1) * K;  // rows past nw: computed, not stored
#if defined(__AVX2__) && defined(__FMA__)
  __m256 a[NW][M];
  for (auto& row : a)
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t k = 0; k < K8; k += kLanes) {
    // Unrolled (M and NW are constants), so that the accumulators stay in registers.
    if constexpr (M == 1) {
      const __m256 xv = _mm256_loadu_ps(x[0] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NW; ++j) a[j][0] = _mm256_fmadd_ps(_mm256_loadu_ps(wr[j] + k), xv, a[j][0]);
    } else {
      __m256 wv[NW];
#pragma GCC unroll 8
      for (int j = 0; j < NW; ++j) wv[j] = _mm256_loadu_ps(wr[j] + k);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        const __m256 xv = _mm256_loadu_ps(x[i] + k);
#pragma GCC unroll 8
        for (int j = 0; j < NW; ++j) a[j][i] = _mm256_fmadd_ps(wv[j], xv, a[j][i]);
      }
    }
  }
  for (int j = 0; j < NW; ++j)
    for (int i = 0; i < M; ++i) _mm256_store_ps(acc[j][i], a[j][i]);
#else
  for (int j = 0; j < NW; ++j)
    for (int i = 0; i < M; ++i)
      for (int64_t k = 0; k < K8; ++k) acc[j][i][k % kLanes] = std::fma(wr[j][k], x[i][k], acc[j][i][k % kLanes]);
#endif
  for (int j = 0; j < nw; ++j)
    for (int i = 0; i < M; ++i) {
      tail(acc[j][i], wr[j], x[i], K8, K);
      out[j + i * out_stride] = reduce_lanes(acc[j][i]);
    }
}

// The tile's rows for M tokens (see dot_tile).
template <int M>
constexpr int tile_rows() {
  return M == 1 ? 8 : M == 2 ? 4 : 2;
}

// All rows [r0, r1) against tokens x[0..M) (M known at compile time).
template <int M>
void rows_times_tokens(float* y, int64_t ldy, const float* wrows, int64_t r0, int64_t r1, const float* const* xs,
                       int64_t K) {
  constexpr int NW = tile_rows<M>();
  for (int64_t r = r0; r < r1; r += NW) {
    const int nw = static_cast<int>(std::min<int64_t>(NW, r1 - r));
    dot_tile<NW, M>(y + r, ldy, wrows + (r - r0) * K, nw, xs, K);
  }
}

// y[n, r] = dot(W_r, x_n) for n in [n0, n1), r in [r0, r1); W rows in `wrows` ((r1 - r0), K).
void block(float* y, int64_t ldy, const float* x, const float* wrows, int64_t n0, int64_t n1, int64_t r0,
           int64_t r1, int64_t K) {
  for (int64_t n = n0; n < n1; n += 4) {
    const int m = static_cast<int>(std::min<int64_t>(4, n1 - n));
    const float* xs[4] = {};
    for (int i = 0; i < m; ++i) xs[i] = x + (n + i) * K;
    float* yn = y + n * ldy;
    switch (m) {
      case 1: rows_times_tokens<1>(yn, ldy, wrows, r0, r1, xs, K); break;
      case 2: rows_times_tokens<2>(yn, ldy, wrows, r0, r1, xs, K); break;
      case 3: rows_times_tokens<3>(yn, ldy, wrows, r0, r1, xs, K); break;
      default: rows_times_tokens<4>(yn, ldy, wrows, r0, r1, xs, K); break;
    }
  }
}

// Few tokens (a decode step, of one request or of a batch of them) against a quantized W: the
// weight rows are decoded in registers (core/quant.h dot_lanes8) instead of into the row buffer,
// with the same values in the same lane order, hence the same results as block(); what it saves
// is writing and re-reading the fp32 rows, which at N = 1 cost as much as the products. Returns
// false where dot_lanes8 has no kernel for W's dtype on this CPU.
bool forward_decoded_in_registers(float* y, const float* x, const StoredMatrix& w, int64_t N) {
  const int64_t K = w.cols, R = w.rows;
  const float* probe[1] = {x};
  if (N > kRegisterDecodeMaxTokens || !dot_lanes8(w.dtype, w.data, w.row_bytes(), 0, probe, 1, K, nullptr))
    return false;
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
  for_blocks_balanced(blocks, [&](int64_t b) {
    const int64_t r0 = b * kRowBlock, r1 = std::min(R, r0 + kRowBlock);
    for (int64_t n = 0; n < N; n += 4) {
      const int m = static_cast<int>(std::min<int64_t>(4, N - n));
      const float* xs[4] = {};
      for (int i = 0; i < m; ++i) xs[i] = x + (n + i) * K;
      alignas(32) float lanes[kRowBlock * 4 * kLanes];  // (rows, m, 8)
      dot_lanes8(w.dtype, w.row(r0), w.row_bytes(), r1 - r0, xs, m, K, lanes);
      for (int64_t j = 0; j < r1 - r0; ++j)
        for (int i = 0; i < m; ++i) y[(n + i) * R + r0 + j] = reduce_lanes(lanes + (j * m + i) * kLanes);
    }
  });
  return true;
}

// Any N, any dtype: kRowBlock weight rows dequantized into a per-thread buffer at a time (F32 rows
// are read in place), then multiplied with up to kTokenBlock tokens.
void forward_buffered(float* y, const float* x, const StoredMatrix& w, int64_t N) {
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
}

}  // namespace

void linear_forward_batch_invariant(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  if (!forward_decoded_in_registers(y, x, w, N)) forward_buffered(y, x, w, N);
  if (bias != nullptr)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < w.rows; ++r) y[n * w.rows + r] += bias[r];
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
