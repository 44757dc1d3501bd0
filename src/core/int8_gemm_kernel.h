// Internal to core/int8_gemm*.cpp: the rows a GEMM call decoded to int8 and the per-ISA kernel
// (int8_gemm_<isa>.cpp, compiled with that ISA's flags, cmake/isa_kernels.cmake).
#pragma once

#include <cstdint>

#include "core/int8_gemm.h"

namespace medtune::int8_detail {

// nrows weight rows decoded once per call: element (b, i) is row i's activation block b.
struct DecodedRows {
  int64_t nrows = 0, nb = 0;
  // (nb, nrows, 32), the integers w_e of quant_int8.h in the kernel's form: AVX-512 VNNI w_e + 128;
  // AVX2 and AVX-VNNI the nibble (Q4_0, Q4_1, Q4_K; Q4_0's w_e = nibble - 8) or w_e itself (Q8_0,
  // NF4, Q5_0, Q5_1, Q5_K).
  const uint8_t* w = nullptr;
  const float* d = nullptr;    // (nb, nrows): d_w
  const float* m = nullptr;    // (nb, nrows): m_w, or null for types without a min
  // (nb, nrows, 2): Q6_K's and Q3_K's int scales of the block's two halves of 16 (lanes 0-3,
  // 4-7), which multiply the halves' integer sums (quant_int8.h's s_j); null for the other types.
  const int32_t* sc = nullptr;
  // The weight rows the caller passes next (int8_gemm.h's next_rows), or null: prefetched into L2
  // a share per tile (prefetch_share), while this call's tiles run.
  const uint8_t* next = nullptr;
  int64_t next_bytes = 0;
};

// Tile k's share (of `tiles`) of rw.next's cache lines, prefetched into L2 (locality 2: not L1,
// which holds the tile's operands). The decode of a call's rows read them from memory otherwise:
// in letter scoring with int8 it waited on those loads for ~6% of the time (perf annotate, session
// 49: the nibbles' first use), as each call's ~17 KiB came at once after the previous call's tiles.
// A few lines per tile: issued a panel's share at once (~17 lines), the prefetches themselves
// stalled, waiting for fill buffers (2% of the time, on the instruction after them).
inline void prefetch_share(const DecodedRows& rw, int64_t k, int64_t tiles) {
  if (rw.next == nullptr) return;
  const int64_t lines = (rw.next_bytes + 63) / 64;
  for (int64_t l = lines * k / tiles; l < lines * (k + 1) / tiles; ++l)
    __builtin_prefetch(rw.next + 64 * l, 0, 2);
}

// Rows i < nrows of W (row i at w + i * row_bytes, nb blocks of 32 of type t) into the layout
// above: wout (nb, nrows, 32), d and m (nb, nrows; m written for the types with a min only), sc
// (nb, nrows, 2; Q6_K only). The integers and scales of int8_detail::weight_block, which the
// scalar reference uses.
void decode_rows_avx512vnni(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                            uint8_t* wout, float* d, float* m, int32_t* sc);
// int8::quantize_pack_panel on AVX-512 (int8_pack_avx512vnni.cpp): the same bits.
void quantize_pack_panel_avx512vnni(const float* x, int64_t p, int8::PackedTokens* out);
// y[k * y_stride + i] for every row i and packed token k (int8_gemm.h's operations).
void gemm_avx512vnni(const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                     int64_t y_stride);

// The same pair for AVX2 (int8_gemm_avx2.cpp), whose decoded form depends on the type.
void decode_rows_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                      uint8_t* wout, float* d, float* m, int32_t* sc);
void gemm_avx2(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
               int64_t y_stride);
// The same body on AVX-VNNI's vpdpbusd (int8_gemm_avxvnni.cpp), rows decoded by decode_rows_avx2.
void gemm_avxvnni(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                  int64_t y_stride);
// Test only: gemm_avxvnni's operations with each vpdpbusd done by AVX2 instructions that give the
// same lanes (int8_gemm_avx2.cpp), so that CPUs without AVX-VNNI test all of that kernel but the
// instruction.
void gemm_avxvnni_emulated(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                           int64_t y_stride);

}  // namespace medtune::int8_detail
