// GPU_CHECK: every GPU runtime call goes through it. A failure throws medtune::Internal naming the
// expression, the vendor's error name and message, and the file and line of the call, so a failure
// on a remote machine can be read from its log alone.
// Included by .cu files only (it needs vendor.h); public headers of src/gpu/ never include it.
#pragma once

#include <string>

#include "core/error.h"
#include "gpu/vendor.h"

namespace medtune::gpu {

[[noreturn]] inline void throw_gpu_error(gpuError_t err, const char* expr, const char* file,
                                         int line) {
  throw Internal(std::string(MEDTUNE_GPU_BACKEND_NAME) + " call failed: " + expr + " -> " +
                 gpuGetErrorName(err) + " (" + gpuGetErrorString(err) + ") at " + file + ":" +
                 std::to_string(line));
}

}  // namespace medtune::gpu

#define GPU_CHECK(expr)                                                          \
  do {                                                                           \
    const gpuError_t gpu_check_err_ = (expr);                                    \
    if (gpu_check_err_ != gpuSuccess)                                            \
      ::medtune::gpu::throw_gpu_error(gpu_check_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch (<<<...>>> returns nothing): a bad configuration is reported here, an
// error inside the kernel at the next synchronizing call (which is checked too).
#define GPU_CHECK_LAUNCH() GPU_CHECK(gpuGetLastError())
