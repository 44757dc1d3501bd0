// Stand-in for <cblas.h> in the STANDALONE GPU test build only (tests/gpu/CMakeLists.txt
// configured on its own, the GPU machine's build, which has no OpenBLAS). It lets the attention
// CPU sources (src/ops/cpu/attention*.cpp) compile and link there: the op tests call their
// ops::ref:: paths, which use no BLAS; the fast paths that do are never run by test_gpu_ops.
// cblas_sgemm below is nevertheless a correct (slow) row/column-major SGEMM, not a dummy.
#pragma once

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

#ifdef __cplusplus
extern "C" {
#endif
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                 float beta, float* C, int ldc);
#ifdef __cplusplus
}
#endif
