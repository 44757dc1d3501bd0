// gpu/blas.h's Blas and gemm_strided_batched on the host, for the HIP-CPU harness (device memory
// is host memory there): each product by plain loops in the row-major contract blas.h states,
// after the stream's queued kernels finish. What this cannot check is the vendor's own mapping of
// that contract (blas.cu's transposition argument), which only a GPU run checks.
#include <hip/hip_runtime.h>

#include "gpu/blas.h"

namespace medtune::gpu {

Blas::Blas(const Stream& stream) : stream_(&stream) {}
Blas::~Blas() = default;

void gemm_strided_batched(const Blas&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float* A, int64_t lda, int64_t stride_a,
                          const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                          int64_t ldc, int64_t stride_c, int64_t batch) {
  (void)hipDeviceSynchronize();
  for (int64_t i = 0; i < batch; ++i) {
    const float* a = A + i * stride_a;
    const float* b = B + i * stride_b;
    float* c = C + i * stride_c;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc += (trans_a ? a[k * lda + m] : a[m * lda + k]) *
                 (trans_b ? b[n * ldb + k] : b[k * ldb + n]);
        c[m * ldc + n] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[m * ldc + n]);
      }
  }
}

}  // namespace medtune::gpu
