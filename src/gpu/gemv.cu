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
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "gpu/decode.h"
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

// The row this warp computes, and its lane (grid: ceil(rows / warps per block), kThreads).
struct WarpRow {
  int64_t r;
  int lane;
  bool valid;  // r < rows: rows past the last are masked by value
};
__device__ inline WarpRow warp_row(int64_t rows) {
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * warps + static_cast<int>(threadIdx.x) / kWarpSize;
  return {r, static_cast<int>(threadIdx.x) % kWarpSize, r < rows};
}

// acc[n] += w[0, 8)·x[n][c, c + 8) for n < N, serially over the 8 (x: (N, cols), 16-byte aligned
// rows).
__device__ inline void dot8(float (&acc)[kTokens], const float (&wf)[8], const uint16_t* x,
                            int64_t cols, int64_t c, int N) {
  float xf[8];
#pragma unroll
  for (int n = 0; n < kTokens; ++n) {
    if (n < N) {  // unrolled with a guard: acc stays in registers
      widen(*reinterpret_cast<const Bf16x8*>(x + n * cols + c), xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[n] = fmaf(wf[e], xf[e], acc[n]);
    }
  }
}

// The warp's sums into y[n * y_stride + r]. Every lane of every warp reaches the same shuffles
// (N is the same for the whole grid).
__device__ inline void store_sums(float* y, int64_t y_stride, const float (&acc)[kTokens], int N,
                                  const WarpRow& wr) {
  for (int n = 0; n < N; ++n) {
    const float sum = warp_sum(acc[n]);
    if (wr.valid && wr.lane == 0) y[n * y_stride + wr.r] = sum;
  }
}

// vec8: cols % 8 == 0 and x, w 16-byte aligned.
//   y: (N, y_stride), columns [0, rows) written   x: (N, cols)   w: (rows, cols)
__global__ void gemv_bf16_kernel(float* y, int64_t y_stride, const uint16_t* x, const uint16_t* w,
                                 int N, int64_t rows, int64_t cols, bool vec8) {
  const WarpRow wr = warp_row(rows);
  const uint16_t* row = w + (wr.valid ? wr.r : 0) * cols;
  float acc[kTokens];
#pragma unroll
  for (int n = 0; n < kTokens; ++n) acc[n] = 0.0f;
  if (wr.valid && vec8) {
    // Unrolled by 4: four 16-byte loads of the row in flight per lane (the read is the kernel).
#pragma unroll 4
    for (int64_t c = 8 * static_cast<int64_t>(wr.lane); c < cols; c += 8 * kWarpSize) {
      float wf[8];
      widen(*reinterpret_cast<const Bf16x8*>(row + c), wf);
      dot8(acc, wf, x, cols, c, N);
    }
  } else if (wr.valid) {
    for (int64_t c = wr.lane; c < cols; c += kWarpSize) {
      const float wf = bf16_bits_to_float(row[c]);
#pragma unroll
      for (int n = 0; n < kTokens; ++n)
        if (n < N) acc[n] = fmaf(wf, bf16_bits_to_float(x[n * cols + c]), acc[n]);
    }
  }
  store_sums(y, y_stride, acc, N, wr);
}

// The members of one gemv_stored_bf16_group launch of one stored type: member i's rows are the
// grid's warps [warp0[i], warp0[i] + rows[i]).
struct StoredMembers {
  float* y[kGemvMaxMembers];
  int64_t y_stride[kGemvMaxMembers];
  const uint8_t* w[kGemvMaxMembers];
  int64_t rows[kGemvMaxMembers];
  int64_t warp0[kGemvMaxMembers];
  int n;
};

// The vec8 path of gemv_bf16_kernel on weights as stored (type T, row_bytes per row): each weight
// decoded (gpu/decode.h, the dequantize kernel's values) and rounded to bf16 where it is used.
// One launch covers every member (a decode step's q, k and v): a warp's member is the one whose
// range holds its index, and its row is computed as a launch of that member alone would.
template <DType T>
__global__ void gemv_stored_kernel(StoredMembers m, const uint16_t* x, int64_t row_bytes, int N,
                                   int64_t cols, decode_detail::Nf4Code code) {
  const int64_t all = m.warp0[m.n - 1] + m.rows[m.n - 1];
  const WarpRow g = warp_row(all);  // g.r: the warp's index over all members
  int i = 0;
  while (i + 1 < m.n && g.r >= m.warp0[i + 1]) ++i;
  const WarpRow wr{g.r - m.warp0[i], g.lane, g.valid};
  const uint8_t* row = m.w[i] + (wr.valid ? wr.r : 0) * row_bytes;
  float acc[kTokens];
#pragma unroll
  for (int n = 0; n < kTokens; ++n) acc[n] = 0.0f;
  if (wr.valid) {
#pragma unroll 4
    for (int64_t c = 8 * static_cast<int64_t>(wr.lane); c < cols; c += 8 * kWarpSize) {
      float wf[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        wf[e] = round_through_bf16(decode_detail::decode<T>(row, c + e, code));
      dot8(acc, wf, x, cols, c, N);
    }
  }
  store_sums(m.y[i], m.y_stride[i], acc, N, wr);
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

void gemv_stored_bf16(float* y, int64_t y_stride, const uint16_t* x, DType t, const void* w,
                      int64_t N, int64_t rows, int64_t cols, const Stream& stream) {
  const GemvMember one{y, y_stride, t, w, rows};
  gemv_stored_bf16_group(&one, 1, x, N, cols, stream);
}

void gemv_stored_bf16_group(const GemvMember* members, int n, const uint16_t* x, int64_t N,
                            int64_t cols, const Stream& stream) {
  const char* op = "gpu::gemv_stored_bf16";
  if (n < 0 || n > kGemvMaxMembers || N < 0 || N > kGemvMaxTokens || cols < 0 || cols % 8 != 0 ||
      !aligned16(x))
    throw Internal(std::string(op) + ": bad call members=" + std::to_string(n) +
                   " N=" + std::to_string(N) + " cols=" + std::to_string(cols) +
                   " (members at most " + std::to_string(kGemvMaxMembers) + ", N at most " +
                   std::to_string(kGemvMaxTokens) + ", cols a multiple of 8, x 16-byte aligned)");
  for (int i = 0; i < n; ++i) {
    const GemvMember& g = members[i];
    if (!decode_detail::supported(g.t))
      throw Internal(std::string(op) + ": no device decode for " + std::string(dtype_name(g.t)));
    if (g.rows < 0 || (N > 1 && g.y_stride < g.rows))
      throw Internal(std::string(op) + ": member " + std::to_string(i) + " has rows=" +
                     std::to_string(g.rows) + " y_stride=" + std::to_string(g.y_stride));
  }
  if (N == 0) return;
  const int64_t warps = kThreads / kWarpSize;
  const decode_detail::Nf4Code code = decode_detail::nf4_code();
  // One launch per run of members of one type (a decode step's q, k and v usually share theirs).
  for (int i0 = 0; i0 < n;) {
    const DType t = members[i0].t;
    StoredMembers m{};
    int64_t all = 0;
    for (; i0 < n && members[i0].t == t && m.n < kGemvMaxMembers; ++i0) {
      if (members[i0].rows == 0) continue;
      m.y[m.n] = members[i0].y;
      m.y_stride[m.n] = members[i0].y_stride;
      m.w[m.n] = static_cast<const uint8_t*>(members[i0].w);
      m.rows[m.n] = members[i0].rows;
      m.warp0[m.n] = all;
      all += members[i0].rows;
      ++m.n;
    }
    if (m.n == 0) continue;
    const unsigned blocks = rows_grid((all + warps - 1) / warps, op);
    const int64_t row_bytes = dtype_row_bytes(t, cols);
    decode_detail::dispatch(t, [&](auto tag) {
      constexpr DType T = decltype(tag)::value;
      gemv_stored_kernel<T><<<blocks, kThreads, 0, stream_of(stream)>>>(
          m, x, row_bytes, static_cast<int>(N), cols, code);
    });
    GPU_CHECK_LAUNCH();
  }
}

}  // namespace medtune::gpu
