// Launch helpers shared by the .cu files (vendor.h-aware; never included by host-only code).
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "gpu/check.h"
#include "gpu/runtime.h"
#include "gpu/vendor.h"
#include "ops/ops.h"

namespace medtune::gpu {

inline gpuStream_t stream_of(const Stream& s) { return static_cast<gpuStream_t>(s.handle()); }

// Threads per block of the grid-stride elementwise kernels and of the one-block-per-row kernels
// (rmsnorm, cross-entropy). A multiple of 64, so a whole number of warps on every chip (kWarpSize is
// 32 or 64); block_sum/block_max (reduce.h) rely on that.
inline constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block, capped: the kernels stride over the rest.
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Grid-stride loop bounds (device code): for (i = thread_index(); i < n; i += grid_threads()).
__device__ inline int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * static_cast<int64_t>(blockDim.x) +
         static_cast<int64_t>(threadIdx.x);
}
__device__ inline int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * static_cast<int64_t>(blockDim.x);
}

// Row counts are launched as grid.x (up to 2^31 - 1 blocks on both vendors).
inline unsigned rows_grid(int64_t rows, const char* op) {
  if (rows > int64_t{0x7fffffff})
    throw Internal(std::string(op) + ": " + std::to_string(rows) + " rows exceed one grid");
  return static_cast<unsigned>(rows);
}

// The attention ops' shape (gpu/attention.cu, gpu/attention_gemm.cu): Internal naming `op` and
// every dimension when the shape is not one ops::AttentionShape allows.
inline void check_attention_shape(const ops::AttentionShape& s, const char* op) {
  if (s.B < 0 || s.T < 0 || s.past < 0 || s.NKV <= 0 || s.NH <= 0 || s.NH % s.NKV != 0 ||
      s.HD <= 0 || s.Smax < s.past + s.T)
    throw Internal(std::string(op) + ": bad shape B=" + std::to_string(s.B) + " T=" +
                   std::to_string(s.T) + " past=" + std::to_string(s.past) + " Smax=" +
                   std::to_string(s.Smax) + " NH=" + std::to_string(s.NH) + " NKV=" +
                   std::to_string(s.NKV) + " HD=" + std::to_string(s.HD));
}

}  // namespace medtune::gpu
