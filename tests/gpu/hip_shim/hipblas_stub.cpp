// LINK-ONLY STUB of the six hipBLAS calls (hipblas/hipblas.h in this directory), so that
// scripts/gpu-compile-check.sh can link test_gpu_ops for gfx90a on a machine without hipBLAS.
// Every call reports HIPBLAS_STATUS_NOT_SUPPORTED: that binary's GEMM cases would FAIL (never
// pass) on an AMD GPU. Real builds link the real hipBLAS (cmake/gpu.cmake).
#include "hipblas/hipblas.h"

extern "C" {
hipblasStatus_t hipblasCreate(hipblasHandle_t* handle) {
  *handle = nullptr;
  return HIPBLAS_STATUS_NOT_SUPPORTED;
}
hipblasStatus_t hipblasDestroy(hipblasHandle_t) { return HIPBLAS_STATUS_NOT_SUPPORTED; }
hipblasStatus_t hipblasSetStream(hipblasHandle_t, hipStream_t) { return HIPBLAS_STATUS_NOT_SUPPORTED; }
hipblasStatus_t hipblasSgemm(hipblasHandle_t, hipblasOperation_t, hipblasOperation_t, int, int, int,
                             const float*, const float*, int, const float*, int, const float*,
                             float*, int) {
  return HIPBLAS_STATUS_NOT_SUPPORTED;
}
hipblasStatus_t hipblasSgemmStridedBatched(hipblasHandle_t, hipblasOperation_t, hipblasOperation_t,
                                           int, int, int, const float*, const float*, int,
                                           hipblasStride, const float*, int, hipblasStride,
                                           const float*, float*, int, hipblasStride, int) {
  return HIPBLAS_STATUS_NOT_SUPPORTED;
}
hipblasStatus_t hipblasGemmEx(hipblasHandle_t, hipblasOperation_t, hipblasOperation_t, int, int, int,
                              const void*, const void*, hipblasDatatype_t, int, const void*,
                              hipblasDatatype_t, int, const void*, void*, hipblasDatatype_t, int,
                              hipblasDatatype_t, hipblasGemmAlgo_t) {
  return HIPBLAS_STATUS_NOT_SUPPORTED;
}
}
