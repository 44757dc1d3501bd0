// gpu/blas.h through cuBLAS / hipBLAS. Both are column-major; a row-major (r, c) matrix is the
// column-major (c, r) matrix of its transpose, so each row-major product C = A·B is issued as
// the column-major Cᵀ = Bᵀ·Aᵀ (derivation of each call's arguments next to it).
#define MEDTUNE_GPU_WANT_BLAS 1  // before any include: vendor.h then maps the BLAS names
#include "gpu/blas.h"

#include <climits>
#include <string>
#include <utility>

#include "core/error.h"
#include "gpu/launch.h"

#define GPUBLAS_CHECK(expr)                                                                  \
  do {                                                                                       \
    const gpublasStatus_t gpublas_status_ = (expr);                                          \
    if (gpublas_status_ != GPUBLAS_STATUS_SUCCESS)                                           \
      throw ::medtune::Internal(std::string(MEDTUNE_GPUBLAS_LIBRARY) + " call failed: " #expr \
                                " -> status " + std::to_string(static_cast<int>(gpublas_status_)) + \
                                " at " __FILE__ ":" + std::to_string(__LINE__));             \
  } while (0)

namespace medtune::gpu {

namespace {

gpublasHandle_t handle_of(const Blas& b) { return static_cast<gpublasHandle_t>(b.handle()); }

int as_int(int64_t v, const char* op) {
  if (v < 0 || v > INT_MAX)
    throw Internal(std::string(op) + ": dimension " + std::to_string(v) + " does not fit the BLAS's int");
  return static_cast<int>(v);
}

// Column-major C (m, n) = alpha·op(A) (m, k) · op(B) (k, n) (+ C), β = 0 or 1.
void sgemm(const Blas& blas, gpublasOperation_t ta, gpublasOperation_t tb, int m, int n, int k,
           const float* a, int lda, const float* b, int ldb, float* c, int ldc, bool accumulate,
           float alpha) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C unchanged or zeros (not left to the BLAS's quick return)
    if (!accumulate)
      GPU_CHECK(gpuMemsetAsync(c, 0, static_cast<size_t>(m) * static_cast<size_t>(n) * sizeof(float),
                               stream_of(blas.stream())));
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  GPUBLAS_CHECK(gpublasSgemm(handle_of(blas), ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc));
}

}  // namespace

const char* blas_library() { return MEDTUNE_GPUBLAS_LIBRARY; }

Blas::Blas(const Stream& stream) {
  gpublasHandle_t h = nullptr;
  GPUBLAS_CHECK(gpublasCreate(&h));
  handle_ = h;
  stream_ = &stream;
  GPUBLAS_CHECK(gpublasSetStream(h, stream_of(stream)));
  GPUBLAS_CHECK(MEDTUNE_GPUBLAS_SET_FP32_MATH(h));
}

Blas::~Blas() {
  if (handle_ != nullptr) gpublasDestroy(static_cast<gpublasHandle_t>(handle_));  // no throw here
}

Blas::Blas(Blas&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)),
      stream_(std::exchange(other.stream_, nullptr)) {}

Blas& Blas::operator=(Blas&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) gpublasDestroy(static_cast<gpublasHandle_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

// y (N, rows) = x (N, cols)·Wᵀ  <=>  column-major yᵀ (rows, N) = W (rows, cols)·xᵀ (cols, N).
// W's memory read column-major is Wᵀ (cols, rows), ld cols: op T. x's is xᵀ (cols, N): op N.
void linear_forward(const Blas& blas, float* y, const float* x, const float* w, int64_t N,
                    int64_t rows, int64_t cols, bool accumulate, float alpha) {
  const char* op = "gpu::linear_forward";
  sgemm(blas, GPUBLAS_OP_T, GPUBLAS_OP_N, as_int(rows, op), as_int(N, op), as_int(cols, op), w,
        as_int(cols, op), x, as_int(cols, op), y, as_int(rows, op), accumulate, alpha);
}

// dx (N, cols) = dy (N, rows)·W  <=>  dxᵀ (cols, N) = Wᵀ (cols, rows)·dyᵀ (rows, N).
// W's memory column-major is Wᵀ (cols, rows), ld cols: op N. dy's is dyᵀ (rows, N), ld rows: op N.
void linear_backward_input(const Blas& blas, float* dx, const float* dy, const float* w, int64_t N,
                           int64_t rows, int64_t cols, bool accumulate, float alpha) {
  const char* op = "gpu::linear_backward_input";
  sgemm(blas, GPUBLAS_OP_N, GPUBLAS_OP_N, as_int(cols, op), as_int(N, op), as_int(rows, op), w,
        as_int(cols, op), dy, as_int(rows, op), dx, as_int(cols, op), accumulate, alpha);
}

// dW (rows, cols) = dyᵀ (rows, N)·x (N, cols)  <=>  dWᵀ (cols, rows) = xᵀ (cols, N)·dy (N, rows).
// x's memory column-major is xᵀ (cols, N), ld cols: op N. dy's is dyᵀ (rows, N), ld rows: op T.
void linear_backward_weight(const Blas& blas, float* dw, const float* dy, const float* x, int64_t N,
                            int64_t rows, int64_t cols, bool accumulate, float alpha) {
  const char* op = "gpu::linear_backward_weight";
  sgemm(blas, GPUBLAS_OP_N, GPUBLAS_OP_T, as_int(cols, op), as_int(rows, op), as_int(N, op), x,
        as_int(cols, op), dy, as_int(rows, op), dw, as_int(cols, op), accumulate, alpha);
}

// Row-major C (M, N) = op(A)·op(B)  <=>  column-major Cᵀ (N, M) = op(B)ᵀ·op(A)ᵀ. B's memory read
// column-major is Bᵀ (ld ldb): op(B)ᵀ is that memory as it is (OP_N) when B is not transposed, and
// its transpose (OP_T) when it is; the same for A.
void gemm(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const char* op = "gpu::gemm";
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (ldc != N) throw Internal("gpu::gemm: K = 0 with a strided C (ldc != N) is not supported");
    if (beta == 0.0f) {
      GPU_CHECK(gpuMemsetAsync(C, 0, static_cast<size_t>(M) * static_cast<size_t>(N) * sizeof(float),
                               stream_of(blas.stream())));
    } else if (beta != 1.0f) {
      throw Internal("gpu::gemm: K = 0 with beta other than 0 or 1 is not supported");
    }
    return;
  }
  GPUBLAS_CHECK(gpublasSgemm(handle_of(blas), trans_b ? GPUBLAS_OP_T : GPUBLAS_OP_N,
                             trans_a ? GPUBLAS_OP_T : GPUBLAS_OP_N, as_int(N, op), as_int(M, op),
                             as_int(K, op), &alpha, B, as_int(ldb, op), A, as_int(lda, op), &beta, C,
                             as_int(ldc, op)));
}

// As gemm, batch products at once: the same transposition argument per product, and each
// product's column-major Cᵀ_i = op(B_i)ᵀ·op(A_i)ᵀ starts at its row-major C_i.
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                          int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch) {
  const char* op = "gpu::gemm_strided_batched";
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) throw Internal("gpu::gemm_strided_batched: K = 0");
  GPUBLAS_CHECK(gpublasSgemmStridedBatched(
      handle_of(blas), trans_b ? GPUBLAS_OP_T : GPUBLAS_OP_N, trans_a ? GPUBLAS_OP_T : GPUBLAS_OP_N,
      as_int(N, op), as_int(M, op), as_int(K, op), &alpha, B, as_int(ldb, op), stride_b, A,
      as_int(lda, op), stride_a, &beta, C, as_int(ldc, op), stride_c, as_int(batch, op)));
}

// As gemm (the same transposition argument), through GemmEx with bf16 A and B.
void gemm_bf16(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  const char* op = "gpu::gemm_bf16";
  if (M == 0 || N == 0) return;
  if (K == 0) throw Internal("gpu::gemm_bf16: K = 0");
  GPUBLAS_CHECK(gpublasGemmEx(handle_of(blas), trans_b ? GPUBLAS_OP_T : GPUBLAS_OP_N,
                              trans_a ? GPUBLAS_OP_T : GPUBLAS_OP_N, as_int(N, op), as_int(M, op),
                              as_int(K, op), &alpha, B, GPUBLAS_R_16BF, as_int(ldb, op), A,
                              GPUBLAS_R_16BF, as_int(lda, op), &beta, C, GPUBLAS_R_32F,
                              as_int(ldc, op), GPUBLAS_COMPUTE_32F, GPUBLAS_GEMM_DEFAULT));
}

}  // namespace medtune::gpu
