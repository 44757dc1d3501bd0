// linear_forward and linear_backward_input at `precision: bf16` (ops/linear.h).
//
// Both operands are rounded to bf16 (round to nearest even, core/half.h's f32_to_bf16, as torch and
// the GPU backend round; a BF16 checkpoint's weights are used as stored), every product of two bf16
// values is exact in fp32, and the sums are fp32 adds. Two kernels compute exactly that:
//   kOneDnn        oneDNN's bf16 matmul (AVX512-BF16 `vdpbf16ps`, or AMX), on CPUs that have it;
//   kWidenedSgemm  the rounded operands widened back to fp32 and multiplied by OpenBLAS's SGEMM,
//                  everywhere else (same values, no speed gained; keeps one precision meaning one
//                  thing on every CPU).
// They differ only in the order of the fp32 sums, as two BLAS libraries do in fp32.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "ops/cpu/bf16_rows.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/linear.h"

namespace medtune::ops {

namespace {

// Weight elements converted at a time (4 MiB of bf16, as linear.cpp's 4 MiB of fp32): all of a
// SmolLM2 projection, a 7B model's 4096 x 4096 in 8 pieces.
constexpr int64_t kChunkElems = int64_t{1} << 21;

int64_t chunk_rows(const StoredMatrix& w) { return std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, w.cols)); }

// Tokens at or below which the forward dots each weight row with the tokens as it is decoded and
// rounded (no bf16 matrix is written: decode would otherwise convert every weight of the model
// per token), as linear_forward's fused path does at fp32.
constexpr int64_t kGemvMaxTokens = 4;

// Elements below which a conversion loop stays on one thread.
constexpr int64_t kParallelElems = 65536;

// Rows [r0, r1) of W (not BF16) dequantized to fp32 and rounded into out (r1 - r0, cols).
void round_rows(const StoredMatrix& w, int64_t r0, int64_t r1, uint16_t* out) {
#pragma omp parallel if ((r1 - r0) * w.cols > kParallelElems)
  {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_rows(row.data(), w, r, r + 1);
      for (int64_t c = 0; c < w.cols; ++c)
        out[(r - r0) * w.cols + c] = detail::bf16_bits(row[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace

namespace detail {

void round_to_bf16(uint16_t* out, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(x[i]);
}

void round_all_through_bf16(float* out, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) out[i] = round_through_bf16(x[i]);
}

const uint16_t* weight_rows_bf16(const StoredMatrix& w, int64_t r0, int64_t r1, std::vector<uint16_t>& scratch) {
  if (w.dtype == DType::BF16) return reinterpret_cast<const uint16_t*>(w.row(r0));
  if (w.bf16 != nullptr) return w.bf16 + r0 * w.cols;
  scratch.resize(static_cast<size_t>((r1 - r0) * w.cols));
  round_rows(w, r0, r1, scratch.data());
  return scratch.data();
}

const float* weight_rows_rounded(const StoredMatrix& w, int64_t r0, int64_t r1, std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>((r1 - r0) * w.cols));
  float* out = scratch.data();
#pragma omp parallel for schedule(static) if ((r1 - r0) * w.cols > kParallelElems)
  for (int64_t r = r0; r < r1; ++r) {
    float* row = out + (r - r0) * w.cols;
    dequantize_rows(row, w, r, r + 1);
    for (int64_t c = 0; c < w.cols; ++c) row[c] = round_through_bf16(row[c]);
  }
  return out;
}

}  // namespace detail

namespace {

using detail::round_all_through_bf16;
using detail::round_to_bf16;
using detail::weight_rows_bf16;
using detail::weight_rows_rounded;

// a . b over n elements, in fp32 with 16 independent partial sums (so the compiler vectorizes it
// without reassociating anything: the order is fixed by this code).
float dot_f32(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y (N, rows) = xr (N, cols) . bf16(W)^T for N <= kGemvMaxTokens; xr already rounded through bf16.
// Each row decoded, rounded and multiplied in registers (core/quant.h dot_row_bf16); NF4, which
// has no such kernel, through a row buffer.
void forward_fused_rows(float* y, const float* xr, const StoredMatrix& w, int64_t N) {
  if (w.dtype != DType::NF4) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t n = 0; n < N; ++n)
        y[n * w.rows + r] = dot_row_bf16(w.dtype, w.row(r), xr + n * w.cols, w.cols);
    return;
  }
#pragma omp parallel
  {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_rows(row.data(), w, r, r + 1);
      for (int64_t c = 0; c < w.cols; ++c) row[static_cast<size_t>(c)] = round_through_bf16(row[static_cast<size_t>(c)]);
      for (int64_t n = 0; n < N; ++n) y[n * w.rows + r] = dot_f32(row.data(), xr + n * w.cols, w.cols);
    }
  }
}

void add_bias(float* y, const float* bias, int64_t N, int64_t rows) {
  if (bias == nullptr) return;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < rows; ++r) y[n * rows + r] += bias[r];
}

// The calling thread's scratch, kept between calls (no allocation in a decode or training loop).
struct Scratch {
  std::vector<uint16_t> act_bf16, weight_bf16;
  std::vector<float> act_f32, weight_f32;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void round_rows_to_bf16(const StoredMatrix& w, uint16_t* out) {
  if (w.dtype == DType::BF16) throw Internal("round_rows_to_bf16: a BF16 matrix is read as stored");
  round_rows(w, 0, w.rows, out);
}

Bf16Kernel bf16_kernel() { return onednn::bf16_native() ? Bf16Kernel::kOneDnn : Bf16Kernel::kWidenedSgemm; }

const char* bf16_kernel_name(Bf16Kernel k) { return k == Bf16Kernel::kOneDnn ? "onednn" : "widened-sgemm"; }

void linear_forward_bf16_group(const LinearOut* outs, int n, const float* x, int64_t N,
                               Bf16Kernel k) {
  if (n <= 0) return;
  const int64_t K = outs[0].w->cols;
  for (int i = 1; i < n; ++i)
    if (outs[i].w->cols != K)
      throw Internal("linear_forward_bf16_group: members read inputs of different widths");
  Scratch& s = scratch();
  // x is rounded once for all the members (q, k and v read the same normed input).
  if (N <= kGemvMaxTokens) {  // decode: either kernel
    s.act_f32.resize(static_cast<size_t>(N * K));
    round_all_through_bf16(s.act_f32.data(), x, N * K);  // (N, K)
    for (int i = 0; i < n; ++i) forward_fused_rows(outs[i].y, s.act_f32.data(), *outs[i].w, N);
  } else {
    const bool native = k == Bf16Kernel::kOneDnn;
    if (native) {
      s.act_bf16.resize(static_cast<size_t>(N * K));
      round_to_bf16(s.act_bf16.data(), x, N * K);  // (N, K)
    } else {
      s.act_f32.resize(static_cast<size_t>(N * K));
      round_all_through_bf16(s.act_f32.data(), x, N * K);  // (N, K)
    }
    for (int i = 0; i < n; ++i) {
      const StoredMatrix& w = *outs[i].w;
      const int64_t R = w.rows, step = chunk_rows(w);
      for (int64_t r0 = 0; r0 < R; r0 += step) {
        const int64_t r1 = std::min(R, r0 + step);
        float* y = outs[i].y + r0;  // y[:, r0:r1] (N, r1 - r0) = x (N, K) . W[r0:r1]^T
        if (native) {
          const uint16_t* wb = weight_rows_bf16(w, r0, r1, s.weight_bf16);  // (r1 - r0, K)
          onednn::matmul_bf16(N, r1 - r0, K, s.act_bf16.data(), K, wb, K, /*b_rows_are_n=*/true,
                              y, R, false);
        } else {
          const float* wc = weight_rows_rounded(w, r0, r1, s.weight_f32);  // (r1 - r0, K)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N),
                      static_cast<int>(r1 - r0), static_cast<int>(K), 1.0f, s.act_f32.data(),
                      static_cast<int>(K), wc, static_cast<int>(K), 0.0f, y, static_cast<int>(R));
        }
      }
    }
  }
  for (int i = 0; i < n; ++i) add_bias(outs[i].y, outs[i].bias, N, outs[i].w->rows);
}

void linear_forward_bf16(float* y, const float* x, const StoredMatrix& w, const float* bias,
                         int64_t N, Bf16Kernel k) {
  const LinearOut out{y, &w, bias};
  linear_forward_bf16_group(&out, 1, x, N, k);
}

void linear_backward_input_bf16(float* dx, const float* dy, const StoredMatrix& w, int64_t N, bool accumulate,
                                Bf16Kernel k) {
  const int64_t K = w.cols, R = w.rows, step = chunk_rows(w);
  Scratch& s = scratch();
  // dx = sum over chunks of dy[:, chunk] . W[chunk, :], chunks added in order.
  if (k == Bf16Kernel::kOneDnn) {
    s.act_bf16.resize(static_cast<size_t>(N * R));
    round_to_bf16(s.act_bf16.data(), dy, N * R);  // (N, R)
    for (int64_t r0 = 0; r0 < R; r0 += step) {
      const int64_t r1 = std::min(R, r0 + step);
      const uint16_t* wb = weight_rows_bf16(w, r0, r1, s.weight_bf16);  // (r1 - r0, K)
      // dx (N, K) (+)= dy[:, r0:r1] (N, r1 - r0) . wb
      onednn::matmul_bf16(N, K, r1 - r0, s.act_bf16.data() + r0, R, wb, K, /*b_rows_are_n=*/false, dx, K,
                          accumulate || r0 > 0);
    }
  } else {
    s.act_f32.resize(static_cast<size_t>(N * R));
    round_all_through_bf16(s.act_f32.data(), dy, N * R);  // (N, R)
    for (int64_t r0 = 0; r0 < R; r0 += step) {
      const int64_t r1 = std::min(R, r0 + step);
      const float* wc = weight_rows_rounded(w, r0, r1, s.weight_f32);  // (r1 - r0, K)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(K),
                  static_cast<int>(r1 - r0), 1.0f, s.act_f32.data() + r0, static_cast<int>(R), wc,
                  static_cast<int>(K), accumulate || r0 > 0 ? 1.0f : 0.0f, dx, static_cast<int>(K));
    }
  }
}

}  // namespace medtune::ops
