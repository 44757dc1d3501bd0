// The int8 route for quantized weights (`--precision int8`): activations quantized per block of 32
// to int8 (as llama.cpp's block_q8_0 / block_q8_1), integer dot products against the stored
// blocks, one fp32 scale multiply per block. llama.cpp's quantized speed comes from this route.
//
// Numerics (docs/decisions/cpu-dispatch.md, tests/unit/core/test_quant_int8.cpp):
//   - activations: per block of 32, d = max|x| / 127, q = round-half-even(x * (1/d)) in
//     [-127, 127], s = d * sum(q). d and s stay fp32 (llama.cpp rounds d to f16: ours is the
//     more exact choice and costs nothing). A block with a NaN or an infinity gets d = NaN, so
//     the result is NaN as the fp32 path's would be, never a silently finite number.
//   - weights as stored: Q8_0 q (int8), Q4_0 q - 8, Q4_1 q (0..15) with its min m, Q5_0 q - 16,
//     Q5_1 q (0..31) with its min m. The k-quants by sub-block of 32 (core/kquant_layout.h,
//     core/block_bytes_avx2.h): Q4_K q (0..15) and Q5_K q (0..31) with d_w = d*sc_k and min
//     m = -(dmin*m_k) (both products exact in fp32); Q6_K q - 32 with d_w = d and an int8
//     scale per 16 elements, applied to the integer lane sums (s_j below); Q3_K likewise, its
//     q in -4..3 and its 6-bit scales minus 32 (-32..31). Q2_K (a min per 16 elements) has no
//     int8 kernel. IQ4_NL: w = ggml's table value (kquant::kIq4nlValues, |w| <= 127), d_w = d;
//     IQ4_XS by group of 32 likewise, d_w = d * (scale - 32) (exact in fp32).
//     NF4 (DType::NF4 row blocks of 64: fp32 absmax, then 32 bytes, the first element in the
//     high nibble) by half-block of 32: w = the level's int8 value round(kCode[code] * 127)
//     (nf4_levels(); |w| <= 127) and d_w = absmax / 127 in fp32. Unlike the ggml types this
//     rounds the weights too: |kCode * absmax - d_w * w| <= absmax / 254 (+ d_w's fp32 rounding),
//     under 0.4% of the block's absmax where NF4's own levels are 8-34% of it apart.
//   - per block b the integer sum isum_b = sum over lanes j (0..7) of s_j * (sum of w*q over
//     elements 4j..4j+3), exact in int32 in any order (s_j = 1 except Q6_K's and Q3_K's scales;
//     |isum_b| <= 8 * 128 * 4 * 32 * 127 < 2^24, so float(isum_b) is exact too);
//     acc = fma(d_w * d_x, float(isum_b), acc) over blocks in order, one fp32 accumulator; the
//     types with a min (has_min) also macc = fma(m_w, s_x, macc). The result is acc + macc
//     (with a min) or acc.
//     Every kernel computes exactly these operations: the row kernels of every ISA (scalar, AVX2,
//     AVX-VNNI, AVX-512 VNNI) and the GEMM (int8_gemm.h), so a token's result has the same bits
//     whichever kernel ran and whatever else was in its batch. (Until session 27 the row kernels
//     kept 8 lane accumulators: the same values up to fp32 order, which through a model grew to
//     int8's own error between a server at --parallel 4 and at --parallel 1.)
//   - the difference from the fp32 path is the activation rounding: |error| <= sum over blocks
//     of d_x/2 * sum|w| (plus fp32 summation), the bound the tests check.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace medtune::int8 {

constexpr int64_t kBlock = 32;

// 32 activations: x ~ d * q; s = d * sum(q) (for Q4_1's min). 40 bytes.
struct BlockQ8 {
  float d;
  float s;
  int8_t q[kBlock];
};

// The stored types with an int8 kernel: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS, NF4.
// Others (F16, BF16, F32) take the fp32 path.
bool supports(DType t);
// The types whose blocks add a min m_w (Q4_1, Q5_1, Q4_K, Q5_K): their dots end acc + macc.
bool has_min(DType t);

// NF4's 16 levels as int8: round(nf4::kCode[i] * 127), i = the 4-bit code.
const int8_t* nf4_levels();

// x (n), n % 32 == 0 -> n / 32 blocks. Vectorized where the build has AVX2 (the x86 baseline).
void quantize_activations(const float* x, int64_t n, BlockQ8* out);
// The same, one element at a time: the reference the vectorized form equals bit for bit.
void quantize_activations_scalar(const float* x, int64_t n, BlockQ8* out);

// y[k * y_stride] = dot(weight row w_row (32 * nblocks elements of type t), activations of token k) for
// k < ntok; token k's blocks are x + k * nblocks. Runs the kernel of active_isa() (see
// kernel_isa()). t must satisfy supports(t) (Internal otherwise).
void dot_rows(DType t, const uint8_t* w_row, const BlockQ8* x, int64_t nblocks, int64_t ntok,
              float* y, int64_t y_stride);

// Rows r < nrows of W (row r at w + r * row_bytes) against ntok tokens: y[k * y_stride + r], each
// element exactly dot_rows's (the same operations; one dispatch for all the rows).
void dot_row_block(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const BlockQ8* x, int64_t nblocks,
                   int64_t ntok, float* y, int64_t y_stride);

// The scalar reference of dot_rows for one token: the operations above, one at a time.
float dot_scalar(DType t, const uint8_t* w_row, const BlockQ8* x, int64_t nblocks);
// The same through a chosen kernel path (tests and benchmarks); the CPU must support `isa`.
void dot_rows_with(Isa isa, DType t, const uint8_t* w_row, const BlockQ8* x, int64_t nblocks,
                   int64_t ntok, float* y, int64_t y_stride);
void dot_row_block_with(Isa isa, DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const BlockQ8* x,
                        int64_t nblocks, int64_t ntok, float* y, int64_t y_stride);

// The path dot_rows takes on this CPU (active_isa()).
Isa kernel_isa();

// How many bytes ahead of the block it reads the one-row kernel prefetches (the kernel a Q8_0 row
// read once from memory takes: decode): 4096 on AMD Zen 4 (family 25 with AVX-512), 16384 on
// every other CPU. A tuning of the memory stream only: the results are the same bits at any
// distance. For `f`; the second form for this CPU, read once.
int64_t one_row_prefetch_bytes(const CpuFeatures& f);
int64_t one_row_prefetch_bytes();

}  // namespace medtune::int8
