// SwiGLU forward and backward, elementwise (ops.h). Formulas of src/ops/cpu/elementwise*.cpp:
//   h = silu(g)·u = g·σ(g)·u
//   dgate = dh·u·σ(1 + g(1 − σ)),   dup = dh·g·σ
// expf, not __expf: the accurate one (≤ 2 ulp on NVIDIA, ≤ 1 ulp on AMD); no fast math anywhere.
// For g → −∞, expf(−g) = inf and σ = 0: every term is 0·finite, no NaN (as on the CPU).
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

__global__ void swiglu_forward_kernel(float* h, const float* gate, const float* up, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const float g = gate[i];
    h[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dh, const float* gate,
                                       const float* up, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    // Read everything first: the outputs may alias the inputs.
    const float g = gate[i], u = up[i], d = dh[i];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgate[i] = d * u * (sig * (1.0f + g * (1.0f - sig)));
    dup[i] = d * (g * sig);
  }
}

}  // namespace

void swiglu_forward(float* h, const float* gate, const float* up, int64_t n, const Stream& stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(h, gate, up, n);
  GPU_CHECK_LAUNCH();
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                     int64_t n, const Stream& stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(dgate, dup, dh, gate,
                                                                            up, n);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
