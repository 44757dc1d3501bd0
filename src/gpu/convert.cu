// fp32 -> bf16 rounding on the device (ops.h), through the vendor's bf16 type (vendor.h): the
// first piece of bf16 storage (weights and activations in bf16, fp32 compute).
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const bf16_t b = float_to_bf16(src[i]);
    uint16_t bits;
    memcpy(&bits, &b, sizeof bits);  // bf16_t is 2 bytes on both vendors
    dst[i] = bits;
  }
}

}  // namespace

void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, const Stream& stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(dst, src, n);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
