// linear_forward on the int8 route (ops/linear.h, core/quant_int8.h).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/int8_gemm.h"
#include "core/quant_int8.h"
#include "ops/cpu/balanced_blocks.h"
#include "ops/cpu/swiglu_block.h"
#include "ops/linear.h"

namespace medtune::ops {

namespace {
// Weight rows per row-kernel call (its checks and dispatch once).
constexpr int64_t kRowsPerCall = 16;
constexpr int64_t kGemmRows = 48;  // rows per GEMM call: a multiple of its row tiles (AVX-512: 8
                                   // and 6, AVX2: 3)
}  // namespace

bool int8_path(DType t) { return int8::supports(t); }

// The GEMM (core/int8_gemm.h) from this many tokens on; below it the row kernels (decode, the
// server's small batches). Its tiles hold 16 tokens, so fewer pay for empty ones. Measured on Zen 3
// (AVX2, 1 thread, `bench_int8_linear --against int8` with the threshold at 4, every shape; session
// 47, after the row kernels took 8 rows at once): the GEMM against the row kernels, Q4_0 and Q4_1
// (nibbles, the GEMM's cheapest form) 1.25-2.7x as fast at 8 and 12 tokens, 0.65-0.8x at 4; Q8_0
// (signed) 0.8-0.9x at 8 and 12, a tie at 16. Before that change: 16 for every type (Zen 4, Zen 3).
int64_t int8_gemm_min_tokens(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 ? 8 : 16;
}

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

// The tokens packed for the GEMM (int8_gemm.h), panels threaded, in the calling thread's scratch:
// from their quantized blocks q, or (q null) quantized and packed in one pass from x (N, cols).
const int8::PackedTokens& packed_input(const int8::BlockQ8* q, const float* x, int64_t cols,
                                       int64_t N) {
  thread_local int8::PackedTokens mine;
  int8::PackedTokens* packed = &mine;  // named through a pointer: in the threads `mine` is their own
  int8::size_packed(cols / int8::kBlock, N, packed);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < packed->panels; ++p) {
    if (q != nullptr) int8::pack_panel(q, p, packed);
    else int8::quantize_pack_panel(x, p, packed);
  }
  return *packed;
}

// How one call computes: the GEMM for many tokens where the CPU runs it, else the row kernels
// (every N with rows_only). Both give every element the same bits (quant_int8.h), so the choice
// is speed only.
bool use_gemm(DType t, int64_t N, bool rows_only) {
  return !rows_only && N >= int8_gemm_min_tokens(t) && int8::gemm_supports(t) &&
         int8::gemm_available();
}

int64_t row_blocks(const StoredMatrix& w, bool gemm) {
  const int64_t per = gemm ? kGemmRows : kRowsPerCall;
  return (w.rows + per - 1) / per;
}

// Block b of w's rows (kRowsPerCall of them, or kGemmRows for the GEMM; fewer at the end)
// against the N tokens: quantized (q) for the row kernels, packed for the GEMM.
void dot_block(const StoredMatrix& w, int64_t b, const int8::BlockQ8* q, const int8::PackedTokens* packed, int64_t N,
               float* y) {
  if (packed != nullptr) {
    const int64_t r0 = b * kGemmRows, nrows = std::min(kGemmRows, w.rows - r0);
    // A thread's share of the blocks is mostly contiguous (balanced_blocks.h): its next call
    // likely takes block b + 1, whose rows the GEMM prefetches.
    const int64_t r1 = r0 + nrows, next = std::min(kGemmRows, w.rows - r1);
    int8::gemm_rows(w.dtype, w.row(r0), w.row_bytes(), nrows, *packed, y + r0, w.rows,
                    next > 0 ? w.row(r1) : nullptr, next);
    return;
  }
  const int64_t r0 = b * kRowsPerCall, nrows = std::min(kRowsPerCall, w.rows - r0);
  int8::dot_row_block(w.dtype, w.row(r0), w.row_bytes(), nrows, q, w.cols / int8::kBlock, N, y + r0, w.rows);
}

}  // namespace

void linear_forward_int8(float* y, const float* x, const StoredMatrix& w, const float* bias, int64_t N,
                         bool rows_only) {
  if (!int8::supports(w.dtype)) return linear_forward(y, x, w, bias, N);
  const bool gemm = use_gemm(w.dtype, N, rows_only);
  // The GEMM reads the packed tokens only; the row kernels the quantized blocks.
  const int8::BlockQ8* q = gemm ? nullptr : quantized_input(x, w.cols, N);
  const int8::PackedTokens* packed = gemm ? &packed_input(nullptr, x, w.cols, N) : nullptr;
  // Threaded over blocks of weight rows: each row is read from memory once and dotted with all N
  // tokens (token by token from the cache in the row kernels, 16 at a time in the GEMM).
  const int64_t blocks = row_blocks(w, gemm);
  for_blocks_balanced(blocks, [&](int64_t b) { dot_block(w, b, q, packed, N, y); });
  add_bias(y, bias, N, w.rows);
}

void linear_forward_int8_group(const LinearOut* outs, int n, const float* x, int64_t N, bool rows_only) {
  if (n == 0) return;
  const int64_t cols = outs[0].w->cols;
  for (int i = 0; i < n; ++i)
    if (!int8::supports(outs[i].w->dtype) || outs[i].w->cols != cols)
      throw Internal("linear_forward_int8_group: a member without an int8 kernel or with other columns");
  // Every member's row blocks in one list (member i's start at first[i]), split over the threads
  // as one loop: each block is the call linear_forward_int8 makes for it, so the values are its.
  constexpr int kMaxMembers = 8;
  if (n > kMaxMembers) throw Internal("linear_forward_int8_group: more than 8 members");
  // Each member takes the kernel it would take alone (its values are linear_forward_int8's); the
  // tokens are packed once if any takes the GEMM.
  bool gemm[kMaxMembers] = {};
  bool any_gemm = false, all_gemm = true;
  for (int i = 0; i < n; ++i) {
    gemm[i] = use_gemm(outs[i].w->dtype, N, rows_only);
    any_gemm = any_gemm || gemm[i];
    all_gemm = all_gemm && gemm[i];
  }
  // Quantized blocks where a member takes the row kernels (then also packed from them).
  const int8::BlockQ8* q = all_gemm ? nullptr : quantized_input(x, cols, N);
  const int8::PackedTokens* packed = any_gemm ? &packed_input(q, x, cols, N) : nullptr;
  int64_t first[kMaxMembers + 1] = {};
  for (int i = 0; i < n; ++i) first[i + 1] = first[i] + row_blocks(*outs[i].w, gemm[i]);
  const int64_t blocks = first[n];
  for_blocks_balanced(blocks, [&](int64_t g) {
    int i = 0;
    while (g >= first[i + 1]) ++i;
    dot_block(*outs[i].w, g - first[i], q, gemm[i] ? packed : nullptr, N, outs[i].y);
  });
  for (int i = 0; i < n; ++i) add_bias(outs[i].y, outs[i].bias, N, outs[i].w->rows);
}

bool linear_swiglu_int8(float* h, const float* x, const StoredMatrix& gate, const StoredMatrix& up,
                        int64_t N) {
  const int64_t F = gate.rows, cols = gate.cols;
  if (!int8::supports(gate.dtype) || !int8::supports(up.dtype) || up.rows != F || up.cols != cols)
    throw Internal(
        "linear_swiglu_int8: gate and up must share their shape and take the int8 route");
  if (!use_gemm(gate.dtype, N, false) || !use_gemm(up.dtype, N, false)) return false;
  const int8::PackedTokens& packed = packed_input(nullptr, x, cols, N);
  const int64_t blocks = row_blocks(gate, true);
  for_blocks_balanced(blocks, [&](int64_t b) {
    const int64_t r0 = b * kGemmRows, nrows = std::min(kGemmRows, F - r0);
    thread_local std::vector<float> g, u;  // (N, nrows) each: the block's products
    if (g.size() < static_cast<size_t>(N * nrows)) {
      g.resize(static_cast<size_t>(N * nrows));
      u.resize(g.size());
    }
    // Each call prefetches the rows of the next: up's block after gate's, then gate's next block.
    const int64_t r1 = r0 + nrows, next = std::min(kGemmRows, F - r1);
    int8::gemm_rows(gate.dtype, gate.row(r0), gate.row_bytes(), nrows, packed, g.data(), nrows,
                    up.row(r0), nrows);
    int8::gemm_rows(up.dtype, up.row(r0), up.row_bytes(), nrows, packed, u.data(), nrows,
                    next > 0 ? gate.row(r1) : nullptr, next);
    for (int64_t n = 0; n < N; ++n)
      detail::swiglu_block(h + n * F + r0, g.data() + n * nrows, u.data() + n * nrows, nrows);
  });
  return true;
}

}  // namespace medtune::ops
