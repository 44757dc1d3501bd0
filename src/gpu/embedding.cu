// Embedding lookup and its gradient (ops.h): from an fp32 table (embedding_forward/backward) and
// from a stored table of any type gpu::dequantize decodes (embedding_rows, decode in gpu/decode.h).
#include <string>

#include "core/error.h"
#include "gpu/decode.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

// One thread per output element (grid-stride). out: (N, C)   table: (V, C)   ids: (N)
__global__ void embedding_forward_kernel(float* out, const float* table, const int64_t* ids,
                                         int64_t N, int64_t C, int64_t V) {
  const int64_t total = N * C;
  for (int64_t i = thread_index(); i < total; i += grid_threads()) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    out[i] = (id >= 0 && id < V) ? table[id * C + c] : __int_as_float(0x7fc00000);  // quiet NaN
  }
}

// One thread per column c, summing over n in order: deterministic and equal to the CPU loop
// `for n: dtable[ids[n], c] += dout[n, c]`. Adjacent threads touch adjacent columns (coalesced).
// Parallel over C only: enough for the sizes of LoRA training (where the embedding is frozen and
// this is not called); a sort-by-id version is for when full fine-tuning needs it.
__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int64_t* ids,
                                          int64_t N, int64_t C, int64_t V) {
  for (int64_t c = thread_index(); c < C; c += grid_threads()) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids[n];
      if (id < 0 || id >= V) continue;
      dtable[id * C + c] += dout[n * C + c];
    }
  }
}

// One thread per output element (grid-stride). out: (N, C)   table: V rows of row_bytes bytes,
// each C elements of type T   ids: (N) int32. A bad id gives a quiet NaN, as embedding_forward.
template <DType T>
__global__ void embedding_rows_kernel(const uint8_t* table, const int32_t* ids, float* out,
                                      int64_t N, int64_t C, int64_t V, int64_t row_bytes,
                                      decode_detail::Nf4Code code) {
  const int64_t total = N * C;
  for (int64_t i = thread_index(); i < total; i += grid_threads()) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    out[i] = (id >= 0 && id < V) ? decode_detail::decode<T>(table + id * row_bytes, c, code)
                                 : __int_as_float(0x7fc00000);  // quiet NaN
  }
}

}  // namespace

void embedding_rows(DType t, const void* table, const int32_t* ids, float* out, int64_t N,
                    int64_t C, int64_t V, const Stream& stream) {
  if (!decode_detail::supported(t))
    throw Internal("gpu::embedding_rows: " + std::string(dtype_name(t)) +
                   " tables are not implemented on the GPU yet");
  if (N < 0 || V < 0 || C < 0 || C % dtype_block_elems(t) != 0)
    throw Internal("gpu::embedding_rows: row width C = " + std::to_string(C) +
                   " is not a multiple of the " + std::string(dtype_name(t)) + " block size" +
                   " (N = " + std::to_string(N) + ", V = " + std::to_string(V) + ")");
  if (N * C == 0) return;
  const auto* tb = static_cast<const uint8_t*>(table);
  const int64_t rb = dtype_row_bytes(t, C);
  const unsigned grid = blocks_for(N * C);
  const gpuStream_t st = stream_of(stream);
  const decode_detail::Nf4Code code =
      t == DType::NF4 ? decode_detail::nf4_code() : decode_detail::Nf4Code{};
  // One instantiation per type: the decode is resolved at compile time.
  const auto launch = [&](auto type) {
    embedding_rows_kernel<decltype(type)::value><<<grid, kThreads, 0, st>>>(tb, ids, out, N, C, V,
                                                                            rb, code);
  };
  decode_detail::dispatch(t, launch);
  GPU_CHECK_LAUNCH();
}

void embedding_forward(float* out, const float* table, const int64_t* ids, int64_t N, int64_t C,
                       int64_t V, const Stream& stream) {
  if (N * C == 0) return;
  embedding_forward_kernel<<<blocks_for(N * C), kThreads, 0, stream_of(stream)>>>(out, table, ids,
                                                                                  N, C, V);
  GPU_CHECK_LAUNCH();
}

void embedding_backward(float* dtable, const float* dout, const int64_t* ids, int64_t N, int64_t C,
                        int64_t V, const Stream& stream) {
  if (N * C == 0) return;
  embedding_backward_kernel<<<blocks_for(C), kThreads, 0, stream_of(stream)>>>(dtable, dout, ids,
                                                                               N, C, V);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
