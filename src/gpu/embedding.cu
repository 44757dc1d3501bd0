// Embedding lookup and its gradient (ops.h).
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

}  // namespace

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
