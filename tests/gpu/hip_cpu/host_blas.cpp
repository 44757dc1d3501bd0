// gpu/blas.h on the host, for HIP-CPU builds (device memory is host memory there): each product in
// the row-major contract blas.h states, by the host's CBLAS (OpenBLAS), after the stream's queued
// kernels finish; bf16 operands are widened to fp32 first (exact), so gemm_bf16 is an fp32
// product of the bf16 values, as GemmEx with compute type 32F is. What this cannot check is the
// vendor's own mapping of that contract (blas.cu's transposition arguments), which only a GPU run
// checks.
#include <cblas.h>
#include <hip/hip_runtime.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "gpu/blas.h"

namespace medtune::gpu {

namespace {

int as_int(int64_t v, const char* op) {
  if (v < 0 || v > INT32_MAX)
    throw Internal(std::string(op) + ": dimension " + std::to_string(v) + " does not fit the BLAS's int");
  return static_cast<int>(v);
}

// The queued kernels write what the product reads.
void wait_for_device(const char* op) {
  if (hipDeviceSynchronize() != hipSuccess) throw Internal(std::string(op) + ": device sync failed");
}

// C (M, N) = alpha·op(A)·op(B) + beta·C, row-major; K = 0 gives beta·C (beta = 0: zeros, C never
// read, as the contract says).
void host_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const char* op) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == 0.0f ? 0.0f : beta * C[m * ldc + n];
    return;
  }
  if (beta == 0.0f)  // the contract: C's old contents (NaN bytes included) are never read
    for (int64_t m = 0; m < M; ++m) std::memset(C + m * ldc, 0, static_cast<size_t>(N) * sizeof(float));
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              as_int(M, op), as_int(N, op), as_int(K, op), alpha, A, as_int(lda, op), B,
              as_int(ldb, op), beta, C, as_int(ldc, op));
}

// A row-major bf16 matrix (rows, cols) of leading dimension ld widened to fp32, same layout (the
// gaps between rows are zeros: never read past the last row's cols elements).
std::vector<float> widen(const uint16_t* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * ld));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t bits = static_cast<uint32_t>(x[r * ld + c]) << 16;
      std::memcpy(&out[static_cast<size_t>(r * ld + c)], &bits, sizeof bits);
    }
  return out;
}

}  // namespace

const char* blas_library() { return "host CBLAS (HIP-CPU)"; }

Blas::Blas(const Stream& stream) : stream_(&stream) {}
Blas::~Blas() = default;
Blas::Blas(Blas&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), stream_(std::exchange(other.stream_, nullptr)) {}
Blas& Blas::operator=(Blas&& other) noexcept {
  handle_ = std::exchange(other.handle_, nullptr);
  stream_ = std::exchange(other.stream_, nullptr);
  return *this;
}

void linear_forward(const Blas&, float* y, const float* x, const float* w, int64_t N, int64_t rows,
                    int64_t cols, bool accumulate, float alpha) {
  wait_for_device("gpu::linear_forward");
  host_gemm(false, true, N, rows, cols, alpha, x, cols, w, cols, accumulate ? 1.0f : 0.0f, y, rows,
            "gpu::linear_forward");
}

void linear_backward_input(const Blas&, float* dx, const float* dy, const float* w, int64_t N,
                           int64_t rows, int64_t cols, bool accumulate, float alpha) {
  wait_for_device("gpu::linear_backward_input");
  host_gemm(false, false, N, cols, rows, alpha, dy, rows, w, cols, accumulate ? 1.0f : 0.0f, dx, cols,
            "gpu::linear_backward_input");
}

void linear_backward_weight(const Blas&, float* dw, const float* dy, const float* x, int64_t N,
                            int64_t rows, int64_t cols, bool accumulate, float alpha) {
  wait_for_device("gpu::linear_backward_weight");
  host_gemm(true, false, rows, cols, N, alpha, dy, rows, x, cols, accumulate ? 1.0f : 0.0f, dw, cols,
            "gpu::linear_backward_weight");
}

void gemm(const Blas&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  wait_for_device("gpu::gemm");
  host_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, "gpu::gemm");
}

void gemm_strided_batched(const Blas&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                          int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;  // before the K check, as blas.cu orders them
  if (K == 0) throw Internal("gpu::gemm_strided_batched: K = 0");
  wait_for_device("gpu::gemm_strided_batched");
  for (int64_t i = 0; i < batch; ++i)
    host_gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
              C + i * stride_c, ldc, "gpu::gemm_strided_batched");
}

void gemm_bf16(const Blas&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) throw Internal("gpu::gemm_bf16: K = 0");
  wait_for_device("gpu::gemm_bf16");
  // op(A) is (M, K): A's memory holds (K, M) when transposed, (M, K) otherwise; B likewise.
  const std::vector<float> a = trans_a ? widen(A, K, M, lda) : widen(A, M, K, lda);
  const std::vector<float> b = trans_b ? widen(B, N, K, ldb) : widen(B, K, N, ldb);
  host_gemm(trans_a, trans_b, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc,
            "gpu::gemm_bf16");
}

}  // namespace medtune::gpu
