// init + the sum of x[i]^2 in double (ops::sum_squares; the gradient norm of clipping and the
// finiteness check of the adapter after an update), deterministic run to run.
//
// The launch shape depends on n only (never on the device's SM count), so the order of additions
// is fixed: block b's threads each add the squares of their grid-stride elements in double, the
// block adds its threads' sums in a shared-memory tree, and one thread adds the blocks' partial
// sums in block order, after init. Double throughout: with at most ~2^40 terms the sum is
// accurate to ~1e-4 relative at worst and ~1e-13 typically, and squares of floats cannot
// overflow a double, so the result is finite exactly when every x[i] is.
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

constexpr int kSumBlocksMax = 1024;

__global__ void block_sum_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double sums[kThreads];
  double s = 0.0;
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const double xi = static_cast<double>(x[i]);
    s += xi * xi;  // may contract into an FMA: deterministic either way, which is all that is claimed
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void add_partials_kernel(const double* partial, int blocks, double init, double* out) {
  double s = init;
  for (int b = 0; b < blocks; ++b) s += partial[b];
  *out = s;
}

}  // namespace

double sum_squares(const float* x, int64_t n, double init, const Stream& stream) {
  if (n <= 0) return init;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kSumBlocksMax ? wanted : kSumBlocksMax);
  DeviceBuffer scratch(static_cast<size_t>(blocks + 1) * sizeof(double));  // partials, then the total
  double* partial = scratch.as<double>();
  block_sum_squares_kernel<<<blocks, kThreads, 0, stream_of(stream)>>>(x, n, partial);
  GPU_CHECK_LAUNCH();
  add_partials_kernel<<<1, 1, 0, stream_of(stream)>>>(partial, blocks, init, partial + blocks);
  GPU_CHECK_LAUNCH();
  double total = 0;
  copy_to_host_sync(&total, partial + blocks, sizeof total, stream);
  return total;
}

}  // namespace medtune::gpu
