// The int8 route's GEMM: many tokens (prompts, scoring) against rows of quantized weights,
// register-blocked over rows and tokens, where the row kernels of quant_int8.h dot one row with 4
// tokens at a time. llama.cpp's quantized prompt speed comes from such a kernel; medtune's row
// kernels were no faster than its fp32 path for prompts (BENCHMARKS.md). Three kernels: AVX-512
// VNNI (int8_gemm_avx512vnni.cpp), and on 256-bit registers one body (int8_gemm_avx2_body.h) on
// AVX2's instructions (int8_gemm_avx2.cpp) or on AVX-VNNI's (int8_gemm_avxvnni.cpp, run only by
// its unit tests, on an Intel host: docs/decisions/cpu-dispatch.md).
//
// Layout (why it differs from the row kernels'): one 512-bit vpdpbusd multiplies 16 tokens' 4
// activation bytes (one zmm, built once per call by pack_tokens) with 4 bytes of one weight row
// broadcast from memory, so the weights need no transposed copy: each row group is only decoded
// to bytes (Q8_0: copied) once per call. vpdpbusd takes one unsigned operand: the weights, offset
// to w + 128 (1..255 for every type here); the offset's contribution, 128 * sum(q), is removed
// exactly in int32 by starting each token's sum at -128 * sum(q), computed once per call. The
// 256-bit kernels read the same packed tokens, 8 at a time (a ymm), and decode the weights in the
// forms AVX2's vpmaddubsw needs to stay exact (int8_gemm_avx2.cpp says how).
//
// Numerics: quant_int8.h's, per (row, token), over activation blocks b in order (its scalar
// reference, int8::dot_scalar, performs them one at a time; tests compare the bits of each kernel):
//   isum_b = sum_e w_e * q_e, exact in int32 (|isum_b| <= 32 * 128 * 127 < 2^24: float(isum_b)
//            is exact too);
//   acc = fma(d_w * d_x, float(isum_b), acc);  types with a min also macc = fma(m_w, s_x, macc);
//   y = acc + macc (has_min) or acc.
// So the GEMM and the row kernels (dot_rows) give every element the same bits, and every
// element's operations are independent of how many tokens or rows a call has: a token's result is
// the same alone or in any batch, through either kernel.
//
// Types: every type with an int8 kernel (int8::supports). Q6_K's and Q3_K's block halves have their
// own int scales: each half is summed apart and multiplied by its scale in int32 before the two are
// added (int8_gemm_avx512vnni.cpp, int8_gemm_avx2_body.h), the reference's integer sum exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/quant_int8.h"

namespace medtune::int8 {

constexpr int64_t kGemmTokens = 16;  // tokens per zmm: one token panel

// The types the GEMM covers.
bool gemm_supports(DType t);
// Whether a GEMM kernel runs here: the CPU has AVX2 (the baseline) and MEDTUNE_ISA allows it.
bool gemm_available();
// The kernel gemm_rows takes: active_isa()'s (AVX-512 VNNI, AVX-VNNI or AVX2).
Isa gemm_isa();

// ntok tokens' quantized activations (nb blocks each) in the GEMM's order. Per token panel p (16
// tokens; the last one padded with zero activations) and block b: q (8 groups of 4 bytes x 16
// tokens), the 16 tokens' -128 * sum(q), d_x and s_x.
struct PackedTokens {
  int64_t ntok = 0, nb = 0, panels = 0;
  std::vector<int8_t> q;      // (panels, nb, 8, 16, 4)
  std::vector<int32_t> comp;  // (panels, nb, 16)
  std::vector<float> d;       // (panels, nb, 16)
  std::vector<float> s;       // (panels, nb, 16)
};
// x: (ntok, nb) blocks, token k's at x + k * nb.
void pack_tokens(const BlockQ8* x, int64_t nb, int64_t ntok, PackedTokens* out);
// The same in two steps, for callers that pack the panels on several threads: size_packed, then
// pack_panel for every p < out->panels (each writes only panel p).
void size_packed(int64_t nb, int64_t ntok, PackedTokens* out);
void pack_panel(const BlockQ8* x, int64_t p, PackedTokens* out);
// quantize_activations and pack_panel in one pass, for callers that need only the packed form:
// panel p of the tokens x (ntok rows of 32 * nb floats, row k at x + k * 32 * nb), each token
// quantized into a small per-thread buffer and packed from there (the bits of the two steps, and
// no (ntok, nb) blocks written to memory and read back). After size_packed, as pack_panel.
void quantize_pack_panel(const float* x, int64_t p, PackedTokens* out);
// The same with a given path, for tests: Isa::kAvx2 (quantize_activations into the buffer, then
// packed) or Isa::kAvx512Vnni (both steps in registers); Internal if this CPU cannot run it.
// quantize_pack_panel takes the AVX-512 one where gemm_isa() is AVX-512 VNNI.
void quantize_pack_panel_with(Isa isa, const float* x, int64_t p, PackedTokens* out);

// Rows r < nrows of W (row r at w + r * row_bytes, t's blocks, 32 * x.nb elements) against every
// packed token: y[k * y_stride + r]. Runs on the calling thread. gemm_available() must hold.
// next_rows: where the rows of the caller's next call on this thread start (next_nrows of them,
// row_bytes apart), or null; they are prefetched into L2 while this call computes, and change no
// result.
void gemm_rows(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const PackedTokens& x,
               float* y, int64_t y_stride, const uint8_t* next_rows = nullptr,
               int64_t next_nrows = 0);
// The same with a given kernel (Isa::kAvx2, kAvxVnni or kAvx512Vnni), for tests and benchmarks;
// Internal if this CPU cannot run it.
void gemm_rows_with(Isa isa, DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                    const PackedTokens& x, float* y, int64_t y_stride,
                    const uint8_t* next_rows = nullptr, int64_t next_nrows = 0);
// Test only: the AVX-VNNI kernel's operations with its one VNNI instruction done by AVX2 ones
// (int8_gemm_avxvnni.cpp), on any CPU with AVX2.
void gemm_rows_avxvnni_emulated(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                                const PackedTokens& x, float* y, int64_t y_stride);

}  // namespace medtune::int8
