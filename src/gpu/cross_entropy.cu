// Cross-entropy over given logits, forward (per-row losses) and backward (ops.h).
//
// One block per row, three passes over the row: max, Σ exp(z − max) (block reductions, fp32, see
// reduce.h for the error model), then the loss or the gradient. The CPU sums the exponentials in
// double; here the sum is fp32 with at most ceil(V / kThreads) serial terms per thread (~500 for
// a 128k vocabulary) before the tree, a relative error ~(V/kThreads + 8)·2^-24 of a sum of
// positive terms: tests/gpu/ bounds the loss and the gradient with exactly that.
// The fused version (lm_head GEMM in vocabulary chunks, the [N, V] logits never materialized) is
// a later step of issue #8; this one is its reference on the device.
#include "gpu/launch.h"
#include "gpu/ops.h"
#include "gpu/reduce.h"

namespace medtune::gpu {

namespace {

struct RowStats {
  float max;
  float sum;  // Σ exp(z − max)
};

__device__ inline RowStats row_stats(const float* z, int64_t V, float* scratch) {
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = block_sum(sum, scratch);
  return {mx, sum};
}

// grid: N blocks. logits: (N, V)   targets: (N)   losses: (N)
__global__ void cross_entropy_forward_kernel(float* losses, const float* logits,
                                             const int64_t* targets, int64_t V) {
  __shared__ float scratch[kScratchFloats];
  const int64_t n = blockIdx.x;
  const int64_t y = targets[n];
  if (y < 0) {  // uniform over the block: no thread reaches a barrier alone
    if (threadIdx.x == 0) losses[n] = 0.0f;
    return;
  }
  const float* z = logits + n * V;
  const RowStats s = row_stats(z, V, scratch);
  if (threadIdx.x == 0) losses[n] = y < V ? s.max + logf(s.sum) - z[y] : __int_as_float(0x7fc00000);
}

// grid: N blocks. dlogits may alias logits: the row is read completely before the reductions'
// barriers, so before any element is written, and in the last pass each element is read and
// written by the same thread.
__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits,
                                              const int64_t* targets, int64_t V, float scale) {
  __shared__ float scratch[kScratchFloats];
  const int64_t n = blockIdx.x;
  const int64_t y = targets[n];
  const float* z = logits + n * V;
  float* dz = dlogits + n * V;
  if (y < 0) {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dz[v] = 0.0f;
    return;
  }
  const RowStats s = row_stats(z, V, scratch);
  const float k = scale / s.sum;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(z[v] - s.max) * k;
    if (v == y) g -= scale;
    dz[v] = g;
  }
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int64_t* targets, int64_t N,
                           int64_t V, const Stream& stream) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<rows_grid(N, "cross_entropy_forward"), kThreads, 0,
                                 stream_of(stream)>>>(losses, logits, targets, V);
  GPU_CHECK_LAUNCH();
}

void cross_entropy_backward(float* dlogits, const float* logits, const int64_t* targets, int64_t N,
                            int64_t V, float scale, const Stream& stream) {
  if (N == 0 || V == 0) return;
  cross_entropy_backward_kernel<<<rows_grid(N, "cross_entropy_backward"), kThreads, 0,
                                  stream_of(stream)>>>(dlogits, logits, targets, V, scale);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
