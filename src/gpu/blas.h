// The GEMMs of the linear layers on the device, through the vendor's BLAS (cuBLAS / hipBLAS).
//
// Plain C++ (no vendor header, like runtime.h). Every matrix is fp32, row-major and dense, as on
// the CPU (ops/linear.h): a weight W is (rows, cols) = (out_features, in_features). The three
// shapes a linear layer needs:
//   forward          y  (N, rows)   = x (N, cols) · Wᵀ
//   backward, input  dx (N, cols)  (+)= dy (N, rows) · W
//   backward, weight dW (rows, cols) (+)= dyᵀ (rows, N) · x (N, cols)   (LoRA factors, full FT)
// `accumulate` adds into the output (β = 1) instead of overwriting it (β = 0; the output's old
// contents are then never read, NaN bytes included). `alpha` scales the product:
// output = alpha·product (+ output when accumulating), the BLAS's α (one more fp32 product per
// element where alpha is not a power of two). Calls are asynchronous on the handle's
// stream. fp32 arithmetic throughout: cuBLAS is put in CUBLAS_DEFAULT_MATH (no TF32), so the
// error of each output is that of some order of a K-term fp32 sum (tests/gpu/cases_gemm.cpp).
// Dimensions must fit the BLAS's int (Internal otherwise).
#pragma once

#include <cstdint>

#include "gpu/runtime.h"

namespace medtune::gpu {

// "cuBLAS" or "hipBLAS".
const char* blas_library();

// A BLAS handle bound to one stream, which must outlive it (move-only). Creating one allocates vendor workspace: keep it
// for the life of the stream.
class Blas {
 public:
  explicit Blas(const Stream& stream);
  ~Blas();
  Blas(Blas&& other) noexcept;
  Blas& operator=(Blas&& other) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* handle() const { return handle_; }
  const Stream& stream() const { return *stream_; }

 private:
  void* handle_ = nullptr;
  const Stream* stream_ = nullptr;  // not owned: the stream outlives the handle
};

void linear_forward(const Blas& blas, float* y, const float* x, const float* w, int64_t N,
                    int64_t rows, int64_t cols, bool accumulate = false, float alpha = 1.0f);
void linear_backward_input(const Blas& blas, float* dx, const float* dy, const float* w, int64_t N,
                           int64_t rows, int64_t cols, bool accumulate = false,
                           float alpha = 1.0f);
void linear_backward_weight(const Blas& blas, float* dw, const float* dy, const float* x, int64_t N,
                            int64_t rows, int64_t cols, bool accumulate = true,
                            float alpha = 1.0f);

// The general form, row-major with leading dimensions (cblas_sgemm's contract, for the backend's
// gemm: strided sub-matrices such as one LoRA's slice of a stacked product):
//   C (M, N) = alpha·op(A)·op(B) + beta·C,   op(A) (M, K), op(B) (K, N)
// A is (M, lda) row-major, or (K, lda) when trans_a; likewise B; C is (M, ldc). beta = 0 never
// reads C. K = 0 gives beta·C (zeros for beta = 0; C must then be dense, ldc = N).
void gemm(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// gemm over `batch` independent products: A_i = A + i * stride_a (likewise B_i, C_i; strides in
// elements), each with gemm's contract, in one BLAS call (cuBLAS / hipBLAS SgemmStridedBatched,
// fp32 as gemm). The GEMM attention (gpu/attention_gemm.cu): the kv heads of one batch row. C_i
// must not overlap each other; K = 0 is not supported (Internal).
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                          int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch);

// The same with bf16 inputs (bit patterns, as f32_to_bf16 writes them) and an fp32 output,
// products and sums in fp32 (cuBLAS/hipBLAS GemmEx, compute type 32F: tensor cores where the chip
// has them). The bf16 path of the GPU backend: activations and weights rounded to bf16 once, the
// product of two bf16 values exact in fp32, so the only rounding beyond the inputs' is the fp32
// accumulation's (tests/gpu/cases_gemm.cpp).
void gemm_bf16(const Blas& blas, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

}  // namespace medtune::gpu
