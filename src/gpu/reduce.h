// Block-wide reductions for the one-block-per-row kernels (device code only).
//
// A block of blockDim.x threads (a multiple of kWarpSize, at most 1024) reduces one value per
// thread: each warp reduces its lanes (warp_sum, a butterfly), warp leaders park their partials in
// shared memory, and the first warp reduces those. The order of additions is fixed by the block
// and warp sizes, so results are deterministic run to run on a given chip.
//
// Error model (used by the tolerances in tests/gpu/): a thread that first sums k of the row's
// elements serially, followed by the log2(blockDim.x) levels of the tree, gives a sum whose
// rounding error is at most (k + log2(blockDim.x))·2^-24·Σ|terms| (first order).
#pragma once

#include "gpu/vendor.h"

namespace medtune::gpu {

// Every thread of the block must call these (they synchronize). `scratch` holds
// kMaxThreads / kWarpSize floats in shared memory; it may be reused after the call returns.
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
  float total = 0.0f;
  if (warp == 0) {
    total = lane < warps ? scratch[lane] : 0.0f;
    total = warp_sum(total);
    if (lane == 0) scratch[0] = total;
  }
  __syncthreads();
  return scratch[0];
}

__device__ inline float block_max(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float m = lane < warps ? scratch[lane] : -INFINITY;
    m = warp_max(m);
    if (lane == 0) scratch[0] = m;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace medtune::gpu
