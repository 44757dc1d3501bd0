#include "ops/linear.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/nf4.h"
#include "core/quant.h"
#include "ops/cpu/blas_core.h"

namespace medtune::ops {

namespace {
// Links blas_core.cpp into every program that runs these GEMMs: its constructor corrects
// OpenBLAS's kernel choice before main (blas_core.cpp says when and why).
[[maybe_unused]] const BlasCore& (*const kBlasCoreSelection)() = &blas_core;
// Tokens at or below which the fused dequantize-and-dot path wins over dequantize + SGEMM:
// with so few rows of x, SGEMM cannot amortize writing the fp32 weights.
constexpr int64_t kGemvMaxTokens = 4;
// Weight elements dequantized at a time (4 MiB of fp32): a whole projection of a small model
// (SmolLM2's largest, 1536 x 576, is 0.9M) in one piece; the vocabulary-sized lm_head in ~27.
// Each chunk is expanded once by all threads and then used by one SGEMM that OpenBLAS threads
// itself, so x is packed once per chunk instead of once per 64-row panel, and the backward's
// products have a long inner dimension (a chunk's rows) instead of 64.
constexpr int64_t kChunkElems = int64_t{1} << 20;

// Row r of W in fp32. NF4 (bitsandbytes' 4-bit base, core/nf4.h) has its own kernels; every
// other stored type goes through core/quant.h.
inline void dequant_row(const StoredMatrix& w, int64_t r, float* out) {
  if (w.dtype == DType::NF4) nf4::dequantize_blocks(w.row(r), out, w.cols);
  else dequantize_row(w.dtype, w.row(r), out, w.cols);
}
inline float dot_stored_row(const StoredMatrix& w, int64_t r, const float* x) {
  return w.dtype == DType::NF4 ? nf4::dot_blocks(w.row(r), x, w.cols)
                               : dot_row(w.dtype, w.row(r), x, w.cols);
}

// Rows per dequantized chunk (at least one).
int64_t chunk_rows(const StoredMatrix& w) { return std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, w.cols)); }

// The calling thread's fp32 scratch for one chunk, (chunk_rows, cols), kept between calls so
// that the hot loop neither allocates nor page-faults. thread_local: callers may run
// linear_forward from several threads at once (each then gets its own).
float* chunk_scratch(const StoredMatrix& w) {
  thread_local std::vector<float> scratch;
  const auto need = static_cast<size_t>(std::min(w.rows, chunk_rows(w)) * w.cols);
  if (scratch.size() < need) scratch.resize(need);
  return scratch.data();
}

// Rows [r0, r1) of W into out ((r1 - r0), cols), rows spread over the threads.
void dequantize_rows_parallel(float* out, const StoredMatrix& w, int64_t r0, int64_t r1) {
#pragma omp parallel for schedule(static) if ((r1 - r0) * w.cols > 65536)
  for (int64_t r = r0; r < r1; ++r) dequant_row(w, r, out + (r - r0) * w.cols);
}

void add_bias(float* y, const float* bias, int64_t N, int64_t rows) {
  if (bias == nullptr) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < rows; ++r) y[n * rows + r] += bias[r];
}
}  // namespace

void dequantize_rows(float* out, const StoredMatrix& w, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) dequant_row(w, r, out + (r - r0) * w.cols);
}

void linear_forward(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  const int M = static_cast<int>(N), K = static_cast<int>(w.cols), R = static_cast<int>(w.rows);
  if (w.dtype == DType::F32 && N == 1) {
    // One token: OpenBLAS 0.3.21's sgemm is 6-7x slower than its sgemv at M = 1
    // (docs/decisions/blas.md).
    cblas_sgemv(CblasRowMajor, CblasNoTrans, R, K, 1.0f, reinterpret_cast<const float*>(w.data), K,
                x, 1, 0.0f, y, 1);
  } else if (w.dtype == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, R, K, 1.0f, x, K,
                reinterpret_cast<const float*>(w.data), K, 0.0f, y, R);
  } else if (N <= kGemvMaxTokens) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t n = 0; n < N; ++n) y[n * w.rows + r] = dot_stored_row(w, r, x + n * w.cols);
  } else {
    float* chunk = chunk_scratch(w);  // (rows of the chunk, cols)
    const int64_t step = chunk_rows(w);
    for (int64_t r0 = 0; r0 < w.rows; r0 += step) {
      const int64_t r1 = std::min(w.rows, r0 + step);
      dequantize_rows_parallel(chunk, w, r0, r1);
      // y[:, r0:r1] (N, r1-r0) = x (N, K) . chunk^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, static_cast<int>(r1 - r0), K, 1.0f,
                  x, K, chunk, K, 0.0f, y + r0, R);
    }
  }
  add_bias(y, bias, N, w.rows);
}

void linear_backward_input(float* dx, const float* dy, const StoredMatrix& w, int64_t N,
                           bool accumulate) {
  const int M = static_cast<int>(N), K = static_cast<int>(w.cols), R = static_cast<int>(w.rows);
  const float beta0 = accumulate ? 1.0f : 0.0f;
  if (w.dtype == DType::F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, R, 1.0f, dy, R,
                reinterpret_cast<const float*>(w.data), K, beta0, dx, K);
    return;
  }
  // dx = sum over chunks of dy[:, chunk] . W[chunk, :]; chunks accumulate in order (OpenBLAS
  // splits each product over rows and columns of dx, never over the inner dimension), so the
  // result does not depend on the thread count's scheduling.
  float* chunk = chunk_scratch(w);  // (rows of the chunk, cols)
  const int64_t step = chunk_rows(w);
  for (int64_t r0 = 0; r0 < w.rows; r0 += step) {
    const int64_t r1 = std::min(w.rows, r0 + step);
    dequantize_rows_parallel(chunk, w, r0, r1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, static_cast<int>(r1 - r0), 1.0f,
                dy + r0, R, chunk, K, r0 == 0 ? beta0 : 1.0f, dx, K);
  }
}

namespace ref {
void linear_forward(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row(w, r, row.data());
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias != nullptr ? static_cast<double>(bias[r]) : 0.0;
      for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(row[static_cast<size_t>(c)]) * static_cast<double>(x[n * w.cols + c]);
      y[n * w.rows + r] = static_cast<float>(acc);
    }
  }
}
}  // namespace ref

}  // namespace medtune::ops
