// The GEMMs of the linear layers on the device, through the vendor's BLAS (cuBLAS / hipBLAS).
//
// Plain C++ (no vendor header, like runtime.h). Every matrix is fp32, row-major and dense, as on
// the CPU (ops/linear.h): a weight W is (rows, cols) = (out_features, in_features). The three
// shapes a linear layer needs:
//   forward          y  (N, rows)   = x (N, cols) · Wᵀ
//   backward, input  dx (N, cols)  (+)= dy (N, rows) · W
//   backward, weight dW (rows, cols) (+)= dyᵀ (rows, N) · x (N, cols)   (LoRA factors, full FT)
// `accumulate` adds into the output (β = 1) instead of overwriting it (β = 0; the output's old
// contents are then never read, NaN bytes included). Calls are asynchronous on the handle's
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
                    int64_t rows, int64_t cols, bool accumulate = false);
void linear_backward_input(const Blas& blas, float* dx, const float* dy, const float* w, int64_t N,
                           int64_t rows, int64_t cols, bool accumulate = false);
void linear_backward_weight(const Blas& blas, float* dw, const float* dy, const float* x, int64_t N,
                            int64_t rows, int64_t cols, bool accumulate = true);

}  // namespace medtune::gpu
