// The int8 GEMM kernel (int8_gemm.h) for CPUs with AVX2 and neither AVX-VNNI nor AVX-512 VNNI
// (AMD Zen 2/3, Intel before Ice Lake): the rows' decoding for every 256-bit kernel, and the
// kernel body of int8_gemm_avx2_body.h (3 rows x 16 tokens per tile) on AVX2's instructions.
//
// AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pair
// sums, and vpmaddwd with ones widens the pairs to int32. The decoded weights therefore take one
// of two forms, chosen so that no pair sum can saturate (every block sum is exact, as the scalar
// reference's):
//   - nibble types (Q4_0, Q4_1, Q4_K): the raw nibble u in 0..15 as the unsigned operand. A pair
//     sum is at most 2 * 15 * 127 = 3810, so the 8 groups of a block are summed in int16
//     (8 * 3810 = 30480 < 2^15) and widened once per block: two instructions per 32 products.
//     Q4_0's w = u - 8: its -8 * sum(q) is the packed -128 * sum(q) shifted right by 4 (exact).
//   - signed types (Q8_0, NF4, IQ4_NL, IQ4_XS (|w| <= 127), the 5-bit Q5_0, Q5_1, Q5_K, and
//     Q6_K, Q3_K with their scales): |w| as the unsigned operand and
//     w's sign moved onto the tokens' bytes (vpsignb), as llama.cpp does; a pair sum is at most
//     2 * 128 * 127 = 32512, so each is widened at once. |q| <= 127 (quantize_activations), so
//     negating a token byte never wraps. The 5-bit types' unsigned q (0..31; Q5_0's w = q - 16)
//     cannot take the nibble form: 8 groups of pair sums up to 2 * 31 * 127 overflow int16.
// Status: executed on AMD Zen 3 (session 25): bit for bit the scalar reference (test_quant_int8).
#include "core/int8_gemm_kernel.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "core/int8_gemm_decode_avx2.h"

namespace medtune::int8_detail {

// AVX2's sums: vpmaddubsw (saturating int16 pair sums: exact here, see the top) and vpmaddwd with
// ones to widen; a nibble block's 8 groups are summed in int16 and widened once.
namespace int16_sums {
namespace {
inline __m256i nibble_acc(__m256i s, __m256i u, __m256i q) {
  return _mm256_add_epi16(s, _mm256_maddubs_epi16(u, q));
}
inline __m256i nibble_widen(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
inline __m256i signed_acc(__m256i s, __m256i u, __m256i q) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1)));
}
#include "core/int8_gemm_avx2_body.h"
}  // namespace
}  // namespace int16_sums

// The AVX-VNNI kernel's operations (int8_gemm_avxvnni.cpp: every group added to int32 lanes, no
// int16 stage) with each vpdpbusd(s, u, q) replaced by the AVX2 instructions that give the same
// lanes for these operands (u <= 128, so no pair sum saturates). It lets a CPU without AVX-VNNI
// test everything in that kernel but the one instruction (test_quant_int8).
namespace int32_sums {
namespace {
inline __m256i signed_acc(__m256i s, __m256i u, __m256i q) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1)));
}
inline __m256i nibble_acc(__m256i s, __m256i u, __m256i q) { return signed_acc(s, u, q); }
inline __m256i nibble_widen(__m256i s) { return s; }
#include "core/int8_gemm_avx2_body.h"
}  // namespace
}  // namespace int32_sums

void decode_rows_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                      uint8_t* wout, float* d, float* m, int32_t* sc) {
  decode_rows<false>(t, w, row_bytes, nrows, nb, wout, d, m, sc);
}

void gemm_avx2(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
               int64_t y_stride) {
  int16_sums::gemm_body(t, rows, x, y, y_stride);
}

void gemm_avxvnni_emulated(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                           int64_t y_stride) {
  int32_sums::gemm_body(t, rows, x, y, y_stride);
}

}  // namespace medtune::int8_detail
#else
namespace medtune::int8_detail {
// Never selected off x86 (gemm_available() is false there); the symbols must exist.
void decode_rows_avx2(DType, const uint8_t*, int64_t, int64_t, int64_t, uint8_t*, float*, float*, int32_t*) {}
void gemm_avx2(DType, const DecodedRows&, const int8::PackedTokens&, float*, int64_t) {}
void gemm_avxvnni_emulated(DType, const DecodedRows&, const int8::PackedTokens&, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
