// The only file that knows CUDA from HIP (DESIGN.md: one GPU source for NVIDIA and AMD).
//
// Every .cu file of src/gpu/ is compiled unchanged either by nvcc (CMake's CUDA language,
// MEDTUNE_GPU=cuda, which defines MEDTUNE_GPU_CUDA) or by clang/hipcc (CMake's HIP language,
// MEDTUNE_GPU=hip, MEDTUNE_GPU_HIP). Those files use only the names below: our own gpu* names for
// the runtime API, and small device helpers for what differs between the vendors (warp size,
// shuffles, roundings that must not be contracted into FMAs, f16/bf16 conversion, trapping).
// Vendor identifiers are never redefined: we map our names onto theirs, never theirs onto ours.
//
// ROCm floor: Debian 12's ROCm 5.2 (the CI compile check). What it lacks is shimmed here:
//   - no __shfl_xor_sync (the _sync shuffles came with ROCm 6.2): AMD wavefronts execute in lock
//     step, so the mask-less __shfl_xor is the equivalent, and the mask argument is dropped;
//   - __fsqrt_rn is __ocml_native_sqrt_f32 (NOT correctly rounded) and __fmul_rn/__fadd_rn are a
//     plain `x * y` / `x + y` that clang may still contract into an FMA after inlining: the *_rn
//     helpers below use sqrtf (correctly rounded under HIP's default
//     -fhip-fp32-correctly-rounded-divide-sqrt) and `#pragma clang fp contract(off)` instead;
//   - the bf16 type is hip_bfloat16 (hip/hip_bfloat16.h) before ROCm 6, __hip_bfloat16 after.
#pragma once

#include <cstdint>

#if defined(MEDTUNE_GPU_CUDA) == defined(MEDTUNE_GPU_HIP)
#error "src/gpu/vendor.h: define exactly one of MEDTUNE_GPU_CUDA and MEDTUNE_GPU_HIP (cmake/gpu.cmake does)"
#endif

#if defined(MEDTUNE_GPU_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#include <hip/hip_version.h>
#if HIP_VERSION_MAJOR >= 6
#include <hip/hip_bf16.h>
#else
#include <hip/hip_bfloat16.h>
#endif
#endif

// Collectives (src/gpu/collectives.cu only defines MEDTUNE_GPU_COLLECTIVES): RCCL keeps NCCL's API
// names and types, so only the header and the name differ.
#if defined(MEDTUNE_GPU_COLLECTIVES)
#if defined(MEDTUNE_GPU_CUDA)
#include <nccl.h>
#define MEDTUNE_GPU_COLLECTIVES_NAME "nccl"
#else
#include <rccl/rccl.h>
#define MEDTUNE_GPU_COLLECTIVES_NAME "rccl"
#endif
#endif

// ------------------------------------------------------------------------------ runtime API names
#if defined(MEDTUNE_GPU_CUDA)
#define MEDTUNE_GPU_BACKEND_NAME "cuda"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuDeviceProp_t = cudaDeviceProp;
inline constexpr gpuError_t gpuSuccess = cudaSuccess;
inline constexpr gpuError_t gpuErrorNoDevice = cudaErrorNoDevice;
inline constexpr gpuError_t gpuErrorInsufficientDriver = cudaErrorInsufficientDriver;
inline constexpr gpuError_t gpuErrorOutOfMemory = cudaErrorMemoryAllocation;
inline constexpr auto gpuMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr auto gpuMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr auto gpuMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr unsigned gpuStreamNonBlocking = cudaStreamNonBlocking;
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMemGetInfo cudaMemGetInfo
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDeviceSynchronize cudaDeviceSynchronize
#else
#define MEDTUNE_GPU_BACKEND_NAME "hip"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuDeviceProp_t = hipDeviceProp_t;
inline constexpr gpuError_t gpuSuccess = hipSuccess;
inline constexpr gpuError_t gpuErrorNoDevice = hipErrorNoDevice;
inline constexpr gpuError_t gpuErrorInsufficientDriver = hipErrorInsufficientDriver;
inline constexpr gpuError_t gpuErrorOutOfMemory = hipErrorOutOfMemory;
inline constexpr auto gpuMemcpyHostToDevice = hipMemcpyHostToDevice;
inline constexpr auto gpuMemcpyDeviceToHost = hipMemcpyDeviceToHost;
inline constexpr auto gpuMemcpyDeviceToDevice = hipMemcpyDeviceToDevice;
inline constexpr unsigned gpuStreamNonBlocking = hipStreamNonBlocking;
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMemGetInfo hipMemGetInfo
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDeviceSynchronize hipDeviceSynchronize
#endif

namespace medtune::gpu {

// ---------------------------------------------------------------------------------- warp size
// kWarpSize is what the code being compiled runs with: 64 on AMD CDNA (gfx9: MI100/MI200/MI300,
// wave64), 32 on NVIDIA and on RDNA (wave32). It is meaningful in DEVICE code only: the host pass
// of a HIP or CUDA compile cannot know which chip will run the kernel, so host code must use the
// device's queried warp size (DeviceInfo::warp_size) and launch blocks whose width is a multiple
// of 64, which is valid for both. runtime.cu checks at first use that the compiled kWarpSize equals
// the device's and refuses to run otherwise (DESIGN: trap instead of computing garbage).
#if defined(MEDTUNE_GPU_HIP) && defined(__HIP_DEVICE_COMPILE__)
#if defined(__GFX9__)
inline constexpr int kWarpSize = 64;
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;  // clang < 17 has no __GFX9__
#else
inline constexpr int kWarpSize = 32;
#endif
#elif defined(MEDTUNE_GPU_HIP)
inline constexpr int kWarpSize = 64;  // host pass: a placeholder, see above
#else
inline constexpr int kWarpSize = 32;
#endif
// The widest warp of any supported chip: sizes per-warp scratch arrays in shared memory.
inline constexpr int kMaxWarpSize = 64;

// A lane mask with one bit per lane of the warp, built from kWarpSize (never a literal
// 0xffffffff, which would silently name only half of a 64-wide wavefront).
using LaneMask = uint64_t;
inline constexpr LaneMask kAllLanes =
    kWarpSize >= 64 ? ~LaneMask{0} : ((LaneMask{1} << kWarpSize) - 1);

// Butterfly exchange within groups of `width` lanes (width a power of two <= kWarpSize): every
// lane of the warp must call it (no divergence), as both vendors require.
__device__ inline float shfl_xor(float v, int lane_mask, int width = kWarpSize) {
#if defined(MEDTUNE_GPU_CUDA)
  return __shfl_xor_sync(static_cast<unsigned>(kAllLanes), v, lane_mask, width);
#else
  return __shfl_xor(v, lane_mask, width);
#endif
}

// Sum / max over groups of `width` lanes; every lane gets the result. The order of the additions
// is fixed (a butterfly), so the result is deterministic for a given warp size.
__device__ inline float warp_sum(float v, int width = kWarpSize) {
  for (int offset = width / 2; offset > 0; offset /= 2) v += shfl_xor(v, offset, width);
  return v;
}
__device__ inline float warp_max(float v, int width = kWarpSize) {
  for (int offset = width / 2; offset > 0; offset /= 2) v = fmaxf(v, shfl_xor(v, offset, width));
  return v;
}

// ------------------------------------------------------------- roundings that must stay separate
// An op that claims bit-identity with a CPU path (AdamW) must round each product and sum on its
// own, as the CPU does (g++ in ISO mode never contracts). nvcc's __f*_rn are documented never to
// be merged into an FMA; on HIP they are shimmed (see the header comment).
#if defined(MEDTUNE_GPU_CUDA)
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
#else
__device__ inline float mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
__device__ inline float add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
__device__ inline float sub_rn(float a, float b) {
#pragma clang fp contract(off)
  return a - b;
}
__device__ inline float div_rn(float a, float b) { return a / b; }
__device__ inline float sqrt_rn(float a) { return sqrtf(a); }
#endif

// ------------------------------------------------------------------------- half and bfloat16
// IEEE half bits -> float: exact (every half is a float), so any correct conversion is bit-exact.
__device__ inline float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

// bf16 storage type of the vendor (bf16 storage, fp32 compute; DESIGN.md "Numerics").
#if defined(MEDTUNE_GPU_CUDA)
using bf16_t = __nv_bfloat16;
__device__ inline float bf16_to_float(bf16_t v) { return __bfloat162float(v); }
__device__ inline bf16_t float_to_bf16(float v) { return __float2bfloat16_rn(v); }
#elif HIP_VERSION_MAJOR >= 6
using bf16_t = __hip_bfloat16;
__device__ inline float bf16_to_float(bf16_t v) { return __bfloat162float(v); }
__device__ inline bf16_t float_to_bf16(float v) { return __float2bfloat16(v); }
#else
using bf16_t = hip_bfloat16;
__device__ inline float bf16_to_float(bf16_t v) { return static_cast<float>(v); }
__device__ inline bf16_t float_to_bf16(float v) { return bf16_t(v); }  // round to nearest even
#endif
static_assert(sizeof(bf16_t) == 2, "bf16_t must be the 2-byte storage type");
// bf16 bits -> float: the bits are the top half of the float (exact).
__device__ inline float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<unsigned>(bits) << 16);
}

// ------------------------------------------------------------------------------------ trapping
// Stops the kernel (and poisons the context) where continuing would compute garbage.
__device__ inline void trap() {
#if defined(MEDTUNE_GPU_CUDA)
  __trap();
#else
  abort();
#endif
}

}  // namespace medtune::gpu

// ------------------------------------------------------------------------------------- BLAS
// Only src/gpu/blas.cu defines MEDTUNE_GPU_WANT_BLAS before including this file: the BLAS headers
// stay out of every other translation unit. cuBLAS (CUDA toolkit) or hipBLAS (ROCm; header
// <hipblas/hipblas.h> since ROCm 5.3ish, <hipblas.h> before). Debian 12's ROCm 5.2 packages no
// hipBLAS: scripts/gpu-compile-check.sh compiles blas.cu there against tests/gpu/hip_shim/, a
// header declaring the few hipBLAS calls below with hipBLAS's documented signatures (compile
// only; see that directory's README).
#if defined(MEDTUNE_GPU_WANT_BLAS)
#if defined(MEDTUNE_GPU_CUDA)
#include <cublas_v2.h>
using gpublasHandle_t = cublasHandle_t;
using gpublasStatus_t = cublasStatus_t;
using gpublasOperation_t = cublasOperation_t;
inline constexpr gpublasStatus_t GPUBLAS_STATUS_SUCCESS = CUBLAS_STATUS_SUCCESS;
inline constexpr gpublasOperation_t GPUBLAS_OP_N = CUBLAS_OP_N;
inline constexpr gpublasOperation_t GPUBLAS_OP_T = CUBLAS_OP_T;
#define gpublasCreate cublasCreate
#define gpublasDestroy cublasDestroy
#define gpublasSetStream cublasSetStream
#define gpublasSgemm cublasSgemm
#define gpublasSgemmStridedBatched cublasSgemmStridedBatched
// bf16 inputs, fp32 output and accumulation (gemm_bf16).
#define gpublasGemmEx cublasGemmEx
inline constexpr cudaDataType_t GPUBLAS_R_16BF = CUDA_R_16BF;
inline constexpr cudaDataType_t GPUBLAS_R_32F = CUDA_R_32F;
inline constexpr cublasComputeType_t GPUBLAS_COMPUTE_32F = CUBLAS_COMPUTE_32F;
inline constexpr cublasGemmAlgo_t GPUBLAS_GEMM_DEFAULT = CUBLAS_GEMM_DEFAULT;
// Plain fp32 (no TF32 tensor cores): the op tests bound the error of an fp32 product.
#define MEDTUNE_GPUBLAS_SET_FP32_MATH(handle) cublasSetMathMode((handle), CUBLAS_DEFAULT_MATH)
#define MEDTUNE_GPUBLAS_LIBRARY "cuBLAS"
#else
#if __has_include(<hipblas/hipblas.h>)
#include <hipblas/hipblas.h>
#else
#include <hipblas.h>
#endif
using gpublasHandle_t = hipblasHandle_t;
using gpublasStatus_t = hipblasStatus_t;
using gpublasOperation_t = hipblasOperation_t;
inline constexpr gpublasStatus_t GPUBLAS_STATUS_SUCCESS = HIPBLAS_STATUS_SUCCESS;
inline constexpr gpublasOperation_t GPUBLAS_OP_N = HIPBLAS_OP_N;
inline constexpr gpublasOperation_t GPUBLAS_OP_T = HIPBLAS_OP_T;
#define gpublasCreate hipblasCreate
#define gpublasDestroy hipblasDestroy
#define gpublasSetStream hipblasSetStream
#define gpublasSgemm hipblasSgemm
#define gpublasSgemmStridedBatched hipblasSgemmStridedBatched
// bf16 inputs, fp32 output and accumulation (gemm_bf16). The pre-V2 signature: the compute type is
// a hipblasDatatype_t (ROCm 5 and 6 without HIPBLAS_V2).
#define gpublasGemmEx hipblasGemmEx
inline constexpr hipblasDatatype_t GPUBLAS_R_16BF = HIPBLAS_R_16B;
inline constexpr hipblasDatatype_t GPUBLAS_R_32F = HIPBLAS_R_32F;
inline constexpr hipblasDatatype_t GPUBLAS_COMPUTE_32F = HIPBLAS_R_32F;
inline constexpr hipblasGemmAlgo_t GPUBLAS_GEMM_DEFAULT = HIPBLAS_GEMM_DEFAULT;
// hipBLAS's fp32 GEMM is plain fp32 on CDNA (no reduced-precision mode to turn off).
#define MEDTUNE_GPUBLAS_SET_FP32_MATH(handle) HIPBLAS_STATUS_SUCCESS
#define MEDTUNE_GPUBLAS_LIBRARY "hipBLAS"
#endif
#endif  // MEDTUNE_GPU_WANT_BLAS
