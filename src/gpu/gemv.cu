// The bf16 linear layers' product for a few tokens (ops.h gemv_bf16): decode steps. NEVER RUN on
// a GPU yet: checked on the CPU under HIP-CPU (scripts/hip-cpu-check.sh) against the GEMM cases'
// bound (tests/gpu/cases_gemv.cpp).
//
// Why: a decode step multiplies one token by every weight matrix, which is a read of the weights
// (bandwidth-bound), and the BLAS's GEMM at N = 1 read them at ~630 GB/s of the H200's 4.8 TB/s
// (session 31: a 4096 x 4096 bf16 GemmEx in 0.053 ms; the projections were 48% of the step).
//
// One warp per weight row: lane l reads 8 bf16 (16 bytes) of the row at a time, at columns
// 8 l, 8 (l + warp), ..., and dots them with the same columns of each token; the products of two
// bf16 values are exact in fp32, summed by fmaf serially per lane, then a butterfly over the warp.
// Rows past the last are masked by value (their warps still take part in the shuffles).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

constexpr int kTokens = static_cast<int>(kGemvMaxTokens);

struct alignas(16) Bf16x8 {
  uint32_t pair[4];  // bf16 elements 2 i (low half) and 2 i + 1 (high half)
};

__device__ inline void widen(const Bf16x8& v, float (&out)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(v.pair[i] << 16);
    out[2 * i + 1] = __uint_as_float(v.pair[i] & 0xFFFF0000u);
  }
}

// grid: ceil(rows / warps per block), kThreads. vec8: cols % 8 == 0 and x, w 16-byte aligned.
//   y: (N, y_stride), columns [0, rows) written   x: (N, cols)   w: (rows, cols)
__global__ void gemv_bf16_kernel(float* y, int64_t y_stride, const uint16_t* x, const uint16_t* w,
                                 int N, int64_t rows, int64_t cols, bool vec8) {
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * warps + warp;
  const bool valid = r < rows;
  const uint16_t* wr = w + (valid ? r : 0) * cols;
  float acc[kTokens];
#pragma unroll
  for (int n = 0; n < kTokens; ++n) acc[n] = 0.0f;
  if (valid && vec8) {
    for (int64_t c = 8 * static_cast<int64_t>(lane); c < cols; c += 8 * kWarpSize) {
      float wf[8], xf[8];
      widen(*reinterpret_cast<const Bf16x8*>(wr + c), wf);
#pragma unroll
      for (int n = 0; n < kTokens; ++n) {
        if (n < N) {  // unrolled with a guard: acc stays in registers
          widen(*reinterpret_cast<const Bf16x8*>(x + n * cols + c), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[n] = fmaf(wf[e], xf[e], acc[n]);
        }
      }
    }
  } else if (valid) {
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const float wf = bf16_bits_to_float(wr[c]);
#pragma unroll
      for (int n = 0; n < kTokens; ++n)
        if (n < N) acc[n] = fmaf(wf, bf16_bits_to_float(x[n * cols + c]), acc[n]);
    }
  }
  // Every lane of every warp reaches the same shuffles (N is the same for the whole grid).
  for (int n = 0; n < N; ++n) {
    const float sum = warp_sum(acc[n]);
    if (valid && lane == 0) y[n * y_stride + r] = sum;
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void gemv_bf16(float* y, int64_t y_stride, const uint16_t* x, const uint16_t* w, int64_t N,
               int64_t rows, int64_t cols, const Stream& stream) {
  const char* op = "gpu::gemv_bf16";
  if (N < 0 || N > kGemvMaxTokens || rows < 0 || cols < 0 || (N > 1 && y_stride < rows))
    throw Internal(std::string(op) + ": bad shape N=" + std::to_string(N) +
                   " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                   " y_stride=" + std::to_string(y_stride) + " (N at most " +
                   std::to_string(kGemvMaxTokens) + ")");
  if (N == 0 || rows == 0) return;
  const bool vec8 = cols % 8 == 0 && aligned16(x) && aligned16(w);
  const int64_t warps = kThreads / kWarpSize;
  const unsigned blocks = rows_grid((rows + warps - 1) / warps, op);
  gemv_bf16_kernel<<<blocks, kThreads, 0, stream_of(stream)>>>(
      y, y_stride, x, w, static_cast<int>(N), rows, cols, vec8);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
