// Annotations for small functions that both the host and GPU kernels call (gpu/block_decode.h,
// ops/dropout_mask.h): plain inline functions in a host build, __host__ __device__ under nvcc
// or hipcc, so the CPU and the device compute the same thing from one definition.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MEDTUNE_HOST_DEVICE __host__ __device__
#else
#define MEDTUNE_HOST_DEVICE
#endif
// MEDTUNE_NO_EXEC_CHECK (before a template): the templates call the device-only functions a
// kernel gives them; nvcc would otherwise warn about their host instantiation, which is never used.
#if defined(__CUDACC__) && !defined(__HIPCC__)
#define MEDTUNE_NO_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define MEDTUNE_NO_EXEC_CHECK
#endif
