// linear_forward on the int8 route (ops/linear.h, core/quant_int8.h).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/quant_int8.h"
#include "ops/linear.h"

namespace medtune::ops {

namespace {
constexpr int64_t kRowsPerCall = 16;  // weight rows per kernel call (its checks and dispatch once)
}  // namespace

bool int8_path(DType t) { return int8::supports(t); }

namespace {

// x (N, cols) quantized per block of 32 into the calling thread's scratch, (N, nb) blocks, kept
// between calls (no allocation in the decode loop); thread_local as linear.cpp's scratch.
const int8::BlockQ8* quantized_input(const float* x, int64_t cols, int64_t N) {
  const int64_t nb = cols / int8::kBlock;
  thread_local std::vector<int8::BlockQ8> xq;
  if (xq.size() < static_cast<size_t>(N * nb)) xq.resize(static_cast<size_t>(N * nb));
  int8::BlockQ8* q = xq.data();
#pragma omp parallel for schedule(static) if (N > 16)
  for (int64_t n = 0; n < N; ++n) int8::quantize_activations(x + n * cols, cols, q + n * nb);
  return q;
}

void add_bias(float* y, const float* bias, int64_t N, int64_t rows) {
  if (bias == nullptr) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < rows; ++r) y[n * rows + r] += bias[r];
}

int64_t row_blocks(const StoredMatrix& w) { return (w.rows + kRowsPerCall - 1) / kRowsPerCall; }

// Block b of w's rows (kRowsPerCall of them, fewer at the end) against the N quantized tokens.
void dot_block(const StoredMatrix& w, int64_t b, const int8::BlockQ8* q, int64_t N, float* y) {
  const int64_t r0 = b * kRowsPerCall, nrows = std::min(kRowsPerCall, w.rows - r0);
  int8::dot_row_block(w.dtype, w.row(r0), w.row_bytes(), nrows, q, w.cols / int8::kBlock, N, y + r0, w.rows);
}

}  // namespace

void linear_forward_int8(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N) {
  if (!int8::supports(w.dtype)) return linear_forward(y, x, w, bias, N);
  const int8::BlockQ8* q = quantized_input(x, w.cols, N);
  // Threaded over blocks of weight rows: each row is read once and dotted with all N tokens (in
  // tiles of 4 tokens inside the kernel), so a weight byte is decoded once per 4 tokens.
  const int64_t blocks = row_blocks(w);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) dot_block(w, b, q, N, y);
  add_bias(y, bias, N, w.rows);
}

void linear_forward_int8_group(const LinearOut* outs, int n, const float* x, int64_t N) {
  if (n == 0) return;
  const int64_t cols = outs[0].w->cols;
  for (int i = 0; i < n; ++i)
    if (!int8::supports(outs[i].w->dtype) || outs[i].w->cols != cols)
      throw Internal("linear_forward_int8_group: a member without an int8 kernel or with other columns");
  const int8::BlockQ8* q = quantized_input(x, cols, N);
  // Every member's row blocks in one list (member i's start at first[i]), split over the threads
  // as one loop: each block is the call linear_forward_int8 makes for it, so the values are its.
  constexpr int kMaxMembers = 8;
  if (n > kMaxMembers) throw Internal("linear_forward_int8_group: more than 8 members");
  int64_t first[kMaxMembers + 1] = {};
  for (int i = 0; i < n; ++i) first[i + 1] = first[i] + row_blocks(*outs[i].w);
  const int64_t blocks = first[n];
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < blocks; ++g) {
    int i = 0;
    while (g >= first[i + 1]) ++i;
    dot_block(*outs[i].w, g - first[i], q, N, outs[i].y);
  }
  for (int i = 0; i < n; ++i) add_bias(outs[i].y, outs[i].bias, N, outs[i].w->rows);
}

}  // namespace medtune::ops
