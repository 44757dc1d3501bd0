// linear_forward on the int8 route (ops/linear.h, core/quant_int8.h).
#include <algorithm>
#include <vector>

#include "core/quant_int8.h"
#include "ops/linear.h"

namespace medtune::ops {

namespace {
constexpr int64_t kRowsPerCall = 16;  // weight rows per kernel call (its checks and dispatch once)
}  // namespace

bool int8_path(DType t) { return int8::supports(t); }

void linear_forward_int8(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  if (!int8::supports(w.dtype)) return linear_forward(y, x, w, bias, N);
  const int64_t nb = w.cols / int8::kBlock;
  // The calling thread's quantized activations, (N, nb) blocks, kept between calls (no
  // allocation in the decode loop); thread_local as linear.cpp's scratch.
  thread_local std::vector<int8::BlockQ8> xq;
  if (xq.size() < static_cast<size_t>(N * nb)) xq.resize(static_cast<size_t>(N * nb));
  int8::BlockQ8* q = xq.data();
#pragma omp parallel for schedule(static) if (N > 16)
  for (int64_t n = 0; n < N; ++n) int8::quantize_activations(x + n * w.cols, w.cols, q + n * nb);
  // Threaded over blocks of weight rows: each row is read once and dotted with all N tokens (in
  // tiles of 4 tokens inside the kernel), so a weight byte is decoded once per 4 tokens.
  const int64_t blocks = (w.rows + kRowsPerCall - 1) / kRowsPerCall;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * kRowsPerCall, nrows = std::min(kRowsPerCall, w.rows - r0);
    int8::dot_row_block(w.dtype, w.row(r0), w.row_bytes(), nrows, q, nb, N, y + r0, w.rows);
  }
  if (bias != nullptr)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < w.rows; ++r) y[n * w.rows + r] += bias[r];
}

}  // namespace medtune::ops
