// The plain-loop cblas_sgemm of cblas.h in this directory (standalone GPU test build only).
#include "cblas.h"

extern "C" void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                            int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                            int ldb, float beta, float* C, int ldc) {
  // Column-major C = op(A)·op(B) is row-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
  if (order == CblasColMajor) {
    cblas_sgemm(CblasRowMajor, tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);
    return;
  }
  const bool at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k)
        acc += (at ? A[k * lda + i] : A[i * lda + k]) * (bt ? B[j * ldb + k] : B[k * ldb + j]);
      float& c = C[i * ldc + j];
      c = alpha * acc + (beta == 0.0f ? 0.0f : beta * c);  // beta = 0: C is never read (BLAS rule)
    }
}
