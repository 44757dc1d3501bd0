// Elementwise ops and row moves of the forward pass (ops.h): add_inplace, scale_inplace, add_bias,
// gather_rows, scatter_rows, undo_/redo_gguf_qk_permutation. Each output element is one fp32 addition,
// one fp32 product or a copy, so the results are bit-identical to the plain CPU loops whatever the
// launch shape (there is nothing to contract into an FMA). Grid-stride loops, one thread per
// element; the permutation works one head per block through shared memory.
#include <string>

#include "core/error.h"
#include "gpu/launch.h"
#include "gpu/ops.h"
#include "ops/dropout.h"

namespace medtune::gpu {

namespace {

// Largest head_dim of undo_gguf_qk_permutation (a head is staged in shared memory; the same limit
// as attention's).
constexpr int64_t kMaxHeadDim = 256;

__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) y[i] += x[i];
}

__global__ void scale_inplace_kernel(float* y, float s, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) y[i] *= s;
}

// y: (N, cols)   bias: (cols)
__global__ void add_bias_kernel(float* y, const float* bias, int64_t total, int64_t cols) {
  for (int64_t i = thread_index(); i < total; i += grid_threads()) y[i] += bias[i % cols];
}

// dst (M, C) = src[rows[i], :]
__global__ void gather_rows_kernel(float* dst, const float* src, const int64_t* rows, int64_t M,
                                   int64_t C) {
  const int64_t total = M * C;
  for (int64_t i = thread_index(); i < total; i += grid_threads())
    dst[i] = src[rows[i / C] * C + i % C];
}

// dst[rows[i], :] = src (M, C)
__global__ void scatter_rows_kernel(float* dst, const float* src, const int64_t* rows, int64_t M,
                                    int64_t C) {
  const int64_t total = M * C;
  for (int64_t i = thread_index(); i < total; i += grid_threads())
    dst[rows[i / C] * C + i % C] = src[i];
}

// xd (N, in) = x under the dropout mask: element (n, j) draws counter (row0 + row(n))·in + j
// (ops::dropout::dropped, the CPU's own function). xd may be x: each thread reads and writes only
// its own element.
__global__ void lora_dropout_kernel(float* xd, const float* x, int64_t N, int64_t in, uint64_t base,
                                    uint64_t threshold, float keep_scale, const int64_t* rows,
                                    int64_t row0) {
  const int64_t total = N * in;
  for (int64_t i = thread_index(); i < total; i += grid_threads()) {
    const int64_t n = i / in, j = i % in;
    const int64_t row = row0 + (rows != nullptr ? rows[n] : n);
    const uint64_t c = static_cast<uint64_t>(row * in) + static_cast<uint64_t>(j);
    xd[i] = ops::dropout::dropped(base, c, threshold) ? 0.0f : x[i] * keep_scale;
  }
}

// One head (HD contiguous floats) per block iteration, heads strided over the grid: the head is
// read into shared memory, then written back permuted (HF element j*half + i <- GGUF 2*i + j).
// The loop bounds are the same for every thread of the block, so the barriers are uniform.
// kInverse: the other way, HF order back into GGUF's (GGUF element 2*i + j <- HF j*half + i).
template <bool kInverse>
__global__ void gguf_qk_permutation_kernel(float* x, int64_t heads, int64_t HD) {
  __shared__ float head[kMaxHeadDim];
  const int64_t half = HD / 2;
  const int64_t t0 = threadIdx.x, nt = blockDim.x;
  for (int64_t h = blockIdx.x; h < heads; h += gridDim.x) {
    float* p = x + h * HD;
    for (int64_t d = t0; d < HD; d += nt) head[d] = p[d];
    __syncthreads();
    for (int64_t d = t0; d < HD; d += nt) {
      if (kInverse) {
        const int64_t i = d / 2, j = d % 2;  // GGUF element d = 2*i + j
        p[d] = head[j * half + i];
      } else {
        const int64_t j = d / half, i = d % half;  // HF element d = j*half + i
        p[d] = head[2 * i + j];
      }
    }
    __syncthreads();  // before the next head overwrites the staging buffer
  }
}

}  // namespace

void add_inplace(float* y, const float* x, int64_t n, const Stream& stream) {
  if (n <= 0) return;
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(y, x, n);
  GPU_CHECK_LAUNCH();
}

void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, uint64_t base, uint64_t threshold,
                  float keep_scale, const int64_t* rows, int64_t row0, const Stream& stream) {
  if (N <= 0 || in <= 0) return;
  lora_dropout_kernel<<<blocks_for(N * in), kThreads, 0, stream_of(stream)>>>(xd, x, N, in, base, threshold,
                                                                              keep_scale, rows, row0);
  GPU_CHECK_LAUNCH();
}

void scale_inplace(float* y, float s, int64_t n, const Stream& stream) {
  if (n <= 0) return;
  scale_inplace_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(y, s, n);
  GPU_CHECK_LAUNCH();
}

void add_bias(float* y, const float* bias, int64_t N, int64_t cols, const Stream& stream) {
  if (N <= 0 || cols <= 0) return;
  add_bias_kernel<<<blocks_for(N * cols), kThreads, 0, stream_of(stream)>>>(y, bias, N * cols,
                                                                            cols);
  GPU_CHECK_LAUNCH();
}

void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C,
                 const Stream& stream) {
  if (M <= 0 || C <= 0) return;
  gather_rows_kernel<<<blocks_for(M * C), kThreads, 0, stream_of(stream)>>>(dst, src, rows, M, C);
  GPU_CHECK_LAUNCH();
}

void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C,
                  const Stream& stream) {
  if (M <= 0 || C <= 0) return;
  scatter_rows_kernel<<<blocks_for(M * C), kThreads, 0, stream_of(stream)>>>(dst, src, rows, M, C);
  GPU_CHECK_LAUNCH();
}

namespace {
template <bool kInverse>
void launch_gguf_qk_permutation(const char* name, float* x, int64_t N, int64_t H, int64_t HD,
                                const Stream& stream) {
  if (HD <= 0 || HD % 2 != 0 || HD > kMaxHeadDim)
    throw Internal(std::string(name) + ": head_dim " + std::to_string(HD) + " must be even and at most " +
                   std::to_string(kMaxHeadDim));
  const int64_t heads = N * H;
  if (heads <= 0) return;
  // One block per head, at most 2^16 blocks; they stride over the rest.
  const unsigned grid =
      static_cast<unsigned>(heads < (int64_t{1} << 16) ? heads : (int64_t{1} << 16));
  gguf_qk_permutation_kernel<kInverse><<<grid, kThreads, 0, stream_of(stream)>>>(x, heads, HD);
  GPU_CHECK_LAUNCH();
}
}  // namespace

void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD, const Stream& stream) {
  launch_gguf_qk_permutation<false>("gpu::undo_gguf_qk_permutation", x, N, H, HD, stream);
}

void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD, const Stream& stream) {
  launch_gguf_qk_permutation<true>("gpu::redo_gguf_qk_permutation", x, N, H, HD, stream);
}

}  // namespace medtune::gpu
