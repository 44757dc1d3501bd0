// Rotary embedding forward and backward, rotate-half convention, in place (ops.h).
//
// The pairing is the CPU op's (src/ops/cpu/elementwise.cpp): element i < HD/2 of a head pairs with
// element i + HD/2, both rotated by the angle of (token n, frequency i):
//   forward   lo' = lo·cos − hi·sin,   hi' = hi·cos + lo·sin
//   backward  the transpose, rotation by −θ: lo' = lo·cos + hi·sin,   hi' = hi·cos − lo·sin
// One thread per pair; each thread reads its two elements before writing them.
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

// x: (N, H, HD)   cos, sin: (N, HD/2). sign = +1 forward, −1 backward (sin → −sin).
__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t N, int64_t H,
                            int64_t HD, float sign) {
  const int64_t half = HD / 2;
  const int64_t pairs = N * H * half;
  for (int64_t p = thread_index(); p < pairs; p += grid_threads()) {
    const int64_t i = p % half;
    const int64_t nh = p / half;  // n * H + h
    const int64_t n = nh / H;
    float* lo = x + nh * HD + i;
    float* hi = lo + half;
    const float c = cos[n * half + i], s = sign * sin[n * half + i];
    const float a = *lo, b = *hi;
    *lo = a * c - b * s;
    *hi = b * c + a * s;
  }
}

void launch(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD,
            float sign, const Stream& stream) {
  const int64_t pairs = N * H * (HD / 2);
  if (pairs == 0) return;
  rope_kernel<<<blocks_for(pairs), kThreads, 0, stream_of(stream)>>>(x, cos, sin, N, H, HD, sign);
  GPU_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD,
                  const Stream& stream) {
  launch(x, cos, sin, N, H, HD, 1.0f, stream);
}

void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD,
                   const Stream& stream) {
  launch(dx, cos, sin, N, H, HD, -1.0f, stream);
}

}  // namespace medtune::gpu
