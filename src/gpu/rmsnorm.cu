// RMSNorm forward and backward (ops.h), one block per row.
//
// Same formulas as src/ops/cpu/rmsnorm.cpp and rmsnorm_backward.cpp (derivation there):
//   forward   r = 1 / sqrt(Σ x² / C + eps),   y = w ⊙ (x·r)
//   backward  dx = r·(w⊙dy) − x·(r³/C · Σ_c w⊙dy⊙x),   dw += Σ_n dy⊙x·r
// The row sums are block reductions (reduce.h): fp32, each thread summing ceil(C / kThreads)
// elements serially, then the tree. dw is summed by one thread per column over n in order, so it
// is deterministic, like the CPU fast path.
#include "gpu/launch.h"
#include "gpu/ops.h"
#include "gpu/reduce.h"

namespace medtune::gpu {

namespace {

// grid: N blocks of kThreads. x, y: (N, C)   w: (C)   rstd: (N) or null
__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* w,
                                       int64_t C, float eps) {
  __shared__ float scratch[kScratchFloats];
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  float* yr = y + n * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  ss = block_sum(ss, scratch);
  // 1/sqrt, not rsqrtf: both vendors' sqrtf and '/' are correctly rounded in our builds (no fast
  // math), rsqrtf is approximate (2 ulp on NVIDIA).
  const float r = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  if (rstd != nullptr && threadIdx.x == 0) rstd[n] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = w[c] * (xr[c] * r);
}

// grid: N blocks of kThreads. Each row reads dy completely (the reduction) before writing dx,
// and each element of dx is written by the thread that read that element of dy: dx may alias dy.
__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dy, const float* x,
                                           const float* w, const float* rstd, int64_t C) {
  __shared__ float scratch[kScratchFloats];
  const int64_t n = blockIdx.x;
  const float* dyr = dy + n * C;
  const float* xr = x + n * C;
  float* dxr = dx + n * C;
  const float r = rstd[n];
  float dot = 0.0f;  // Σ_c w⊙dy⊙x
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += w[c] * dyr[c] * xr[c];
  dot = block_sum(dot, scratch);
  const float k = r * r * r / static_cast<float>(C) * dot;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] = r * (w[c] * dyr[c]) - xr[c] * k;
}

// One thread per column: dw[c] += Σ_n dy[n, c]·(x[n, c]·r[n]), n in order.
__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dy, const float* x,
                                           const float* rstd, int64_t N, int64_t C) {
  for (int64_t c = thread_index(); c < C; c += grid_threads()) {
    float acc = 0.0f;
    for (int64_t n = 0; n < N; ++n) acc += dy[n * C + c] * (x[n * C + c] * rstd[n]);
    dw[c] += acc;
  }
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps, const Stream& stream) {
  if (N == 0 || C == 0) return;
  rmsnorm_forward_kernel<<<rows_grid(N, "rmsnorm_forward"), kThreads, 0, stream_of(stream)>>>(
      y, rstd, x, w, C, eps);
  GPU_CHECK_LAUNCH();
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C, const Stream& stream) {
  if (N == 0 || C == 0) return;
  // dw first: dx may alias dy (same order as the CPU).
  if (dw != nullptr) {
    rmsnorm_backward_dw_kernel<<<blocks_for(C), kThreads, 0, stream_of(stream)>>>(dw, dy, x, rstd,
                                                                                  N, C);
    GPU_CHECK_LAUNCH();
  }
  rmsnorm_backward_dx_kernel<<<rows_grid(N, "rmsnorm_backward"), kThreads, 0, stream_of(stream)>>>(
      dx, dy, x, w, rstd, C);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
