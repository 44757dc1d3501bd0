// Block-wide reductions for the one-block-per-row kernels (device code only).
//
// A block of blockDim.x threads (a multiple of kWarpSize, at most 1024) reduces one value per
// thread: each warp reduces its lanes (warp_sum, a butterfly), warp leaders park their partials in
// shared memory, and every warp then reduces those partials the same way, so every thread holds
// the same total without a third barrier. The order of additions is fixed by the block and warp
// sizes, so results are deterministic run to run on a given chip. Every warp shuffles the same
// number of times: HIP-CPU (tests/gpu/hip_cpu/) implements a shuffle with a block-wide barrier,
// so a second level run by the first warp alone deadlocks or sums garbage there, though it is
// valid on a GPU; the redundant second level costs a few shuffles per block.
//
// Error model (used by the tolerances in tests/gpu/): a thread that first sums k of the row's
// elements serially, followed by the log2(blockDim.x) levels of the tree, gives a sum whose
// rounding error is at most (k + log2(blockDim.x))·2^-24·Σ|terms| (first order).
#pragma once

#include "gpu/vendor.h"

namespace medtune::gpu {

// Every thread of the block must call these (they synchronize). `scratch` holds
// kMaxThreads / kWarpSize floats in shared memory. Other warps may still read it when a thread
// returns: the next block_sum / block_max may reuse it (it starts with a barrier), other code
// only after a __syncthreads().
inline constexpr int kMaxThreads = 1024;
inline constexpr int kScratchFloats = kMaxThreads / 32;  // enough for the narrowest warp

__device__ inline float block_sum(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ inline float block_max(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_max(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

}  // namespace medtune::gpu
