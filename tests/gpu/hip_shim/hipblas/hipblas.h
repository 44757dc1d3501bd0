// COMPILE-ONLY SHIM of hipBLAS for scripts/gpu-compile-check.sh (Debian 12's ROCm 5.2 packages no
// hipBLAS). Declares exactly the hipBLAS names src/gpu/vendor.h maps, with the types, values and
// signatures of hipBLAS's own hipblas.h (ROCm 5.x/6.x), so that hipcc checks src/gpu/blas.cu
// against that API. Never used by a real build: -DMEDTUNE_GPU=hip finds the real hipBLAS
// (cmake/gpu.cmake), and this directory is only ever added with -I by the compile check.
#pragma once

#include <hip/hip_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* hipblasHandle_t;

typedef enum {
  HIPBLAS_STATUS_SUCCESS = 0,
  HIPBLAS_STATUS_NOT_INITIALIZED = 1,
  HIPBLAS_STATUS_ALLOC_FAILED = 2,
  HIPBLAS_STATUS_INVALID_VALUE = 3,
  HIPBLAS_STATUS_MAPPING_ERROR = 4,
  HIPBLAS_STATUS_EXECUTION_FAILED = 5,
  HIPBLAS_STATUS_INTERNAL_ERROR = 6,
  HIPBLAS_STATUS_NOT_SUPPORTED = 7,
  HIPBLAS_STATUS_ARCH_MISMATCH = 8,
  HIPBLAS_STATUS_HANDLE_IS_NULLPTR = 9,
  HIPBLAS_STATUS_INVALID_ENUM = 10,
  HIPBLAS_STATUS_UNKNOWN = 11
} hipblasStatus_t;

typedef enum { HIPBLAS_OP_N = 111, HIPBLAS_OP_T = 112, HIPBLAS_OP_C = 113 } hipblasOperation_t;

typedef enum {
  HIPBLAS_R_16F = 150,
  HIPBLAS_R_32F = 151,
  HIPBLAS_R_64F = 152,
  HIPBLAS_C_16F = 153,
  HIPBLAS_C_32F = 154,
  HIPBLAS_C_64F = 155,
  HIPBLAS_R_8I = 160,
  HIPBLAS_R_8U = 161,
  HIPBLAS_R_32I = 162,
  HIPBLAS_R_32U = 163,
  HIPBLAS_C_8I = 164,
  HIPBLAS_C_8U = 165,
  HIPBLAS_C_32I = 166,
  HIPBLAS_C_32U = 167,
  HIPBLAS_R_16B = 168,
  HIPBLAS_C_16B = 169,
  HIPBLAS_DATATYPE_INVALID = 255
} hipblasDatatype_t;

typedef enum { HIPBLAS_GEMM_DEFAULT = 160 } hipblasGemmAlgo_t;

hipblasStatus_t hipblasCreate(hipblasHandle_t* handle);
hipblasStatus_t hipblasDestroy(hipblasHandle_t handle);
hipblasStatus_t hipblasSetStream(hipblasHandle_t handle, hipStream_t streamId);
hipblasStatus_t hipblasSgemm(hipblasHandle_t handle, hipblasOperation_t transA,
                             hipblasOperation_t transB, int m, int n, int k, const float* alpha,
                             const float* AP, int lda, const float* BP, int ldb, const float* beta,
                             float* CP, int ldc);
// hipBLAS's stride type (int64_t since ROCm 3.x).
typedef int64_t hipblasStride;
hipblasStatus_t hipblasSgemmStridedBatched(hipblasHandle_t handle, hipblasOperation_t transA,
                                           hipblasOperation_t transB, int m, int n, int k,
                                           const float* alpha, const float* AP, int lda,
                                           hipblasStride strideA, const float* BP, int ldb,
                                           hipblasStride strideB, const float* beta, float* CP,
                                           int ldc, hipblasStride strideC, int batchCount);
hipblasStatus_t hipblasGemmEx(hipblasHandle_t handle, hipblasOperation_t transA,
                              hipblasOperation_t transB, int m, int n, int k, const void* alpha,
                              const void* A, hipblasDatatype_t aType, int lda, const void* B,
                              hipblasDatatype_t bType, int ldb, const void* beta, void* C,
                              hipblasDatatype_t cType, int ldc, hipblasDatatype_t computeType,
                              hipblasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif
