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
//   - signed types (Q8_0, NF4, and the 5-bit Q5_0, Q5_1, Q5_K): |w| as the unsigned operand and
//     w's sign moved onto the tokens' bytes (vpsignb), as llama.cpp does; a pair sum is at most
//     2 * 128 * 127 = 32512, so each is widened at once. |q| <= 127 (quantize_activations), so
//     negating a token byte never wraps. The 5-bit types' unsigned q (0..31; Q5_0's w = q - 16)
//     cannot take the nibble form: 8 groups of pair sums up to 2 * 31 * 127 overflow int16.
// Status: executed on AMD Zen 3 (session 25): bit for bit the scalar reference (test_quant_int8).
#include "core/int8_gemm_kernel.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/block_bytes_avx2.h"

namespace medtune::int8_detail {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  // Exact, like f16_to_f32, for every non-NaN half; not _cvtsh_ss, for quant_int8_body.h's reason.
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// 16 packed bytes -> 32 bytes: low nibbles are elements 0..15, high nibbles 16..31.
inline __m256i nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

inline void store32(uint8_t* out, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
}

// One row's nb blocks into cell (b, i) of the layout: out + (b * nrows) * 32, d + b * nrows, ...
void decode_row(DType t, const uint8_t* row, int64_t nrows, int64_t nb, uint8_t* out, float* d,
                float* m, int32_t* scales16) {
  switch (t) {
    case DType::Q8_0:  // w itself (signed form)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 34 * b;
        d[b * nrows] = f16(blk);
        store32(out + b * nrows * 32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
      }
      return;
    case DType::Q4_0:  // the nibble; the kernel removes the 8
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 18 * b;
        d[b * nrows] = f16(blk);
        store32(out + b * nrows * 32, nibbles(blk + 2));
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 20 * b;
        d[b * nrows] = f16(blk);
        m[b * nrows] = f16(blk + 2);
        store32(out + b * nrows * 32, nibbles(blk + 4));
      }
      return;
    case DType::Q4_K:  // sub-block k: (d * sc_k) q - dmin * m_k, q the low (k even) or high nibbles
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ4KBytes * sb;
        const float dd = f16(blk), dmin = f16(blk + 2);
        for (int k = 0; k < 8; ++k) {
          uint8_t sc, mn;
          kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd * static_cast<float>(sc);
          m[b * nrows] = -(dmin * static_cast<float>(mn));
          const __m256i q = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(blk + kquant::kQ4KQsOffset + 32 * (k / 2)));
          const __m256i nib = k % 2 == 0 ? q : _mm256_srli_epi16(q, 4);
          store32(out + b * nrows * 32, _mm256_and_si256(nib, _mm256_set1_epi8(0x0F)));
        }
      }
      return;
    case DType::Q5_0:  // w = q - 16 itself (signed form)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_0Bytes * b;
        d[b * nrows] = f16(blk);
        store32(out + b * nrows * 32,
                _mm256_sub_epi8(block_bytes::q5_values(blk + 2, blk + 6), _mm256_set1_epi8(16)));
      }
      return;
    case DType::Q5_1:  // q (0..31) in the signed form: |w| = w, pair sums widened at once
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_1Bytes * b;
        d[b * nrows] = f16(blk);
        m[b * nrows] = f16(blk + 2);
        store32(out + b * nrows * 32, block_bytes::q5_values(blk + 4, blk + 8));
      }
      return;
    case DType::Q5_K:  // sub-block k: (d * sc_k) q - dmin * m_k, q (0..31) in the signed form
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + block_bytes::kQ5KBytes * sb;
        const float dd = f16(blk), dmin = f16(blk + 2);
        for (int k = 0; k < 8; ++k) {
          uint8_t sc, mn;
          kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd * static_cast<float>(sc);
          m[b * nrows] = -(dmin * static_cast<float>(mn));
          store32(out + b * nrows * 32, block_bytes::q5k_values(blk, k));
        }
      }
      return;
    case DType::Q6_K:  // group g of half h: w = q - 32 itself (signed form), 2 scales of 16
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ6KBytes * sb;
        const float dd = f16(blk + kquant::kQ6KDOffset);
        const int8_t* scales = reinterpret_cast<const int8_t*>(blk + kquant::kQ6KScaleOffset);
        for (int k = 0; k < 8; ++k) {
          const int h = k / 4, g = k % 4;
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd;
          scales16[2 * b * nrows] = scales[8 * h + 2 * g];
          scales16[2 * b * nrows + 1] = scales[8 * h + 2 * g + 1];
          store32(out + b * nrows * 32, block_bytes::q6k_values(blk, h, g));
        }
      }
      return;
    case DType::Q3_K:  // group k of 32: w in -4..3 itself (signed form), 2 scales of 16
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ3KBytes * sb;
        const float dd = f16(blk + kquant::kQ3KDOffset);
        for (int k = 0; k < 8; ++k) {
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd;
          scales16[2 * b * nrows] = kquant::q3k_scale(2 * k, blk + kquant::kQ3KScaleOffset) - 32;
          scales16[2 * b * nrows + 1] =
              kquant::q3k_scale(2 * k + 1, blk + kquant::kQ3KScaleOffset) - 32;
          store32(out + b * nrows * 32, block_bytes::q3k_values(blk, k));
        }
      }
      return;
    case DType::NF4: {  // half b % 2 of block b / 2: the codes (high nibble first) -> levels
      alignas(16) int8_t lut[16];
      for (int i = 0; i < 16; ++i) lut[i] = int8::nf4_levels()[i];
      const __m256i levels =
          _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lut)));
      const __m128i m4 = _mm_set1_epi8(0x0F);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + nf4::kRowBlockBytes * (b / 2);
        float absmax;
        std::memcpy(&absmax, blk, 4);
        d[b * nrows] = absmax / 127.0f;
        const __m128i bytes =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + 16 * (b % 2)));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4),
                      lo = _mm_and_si128(bytes, m4);
        const __m256i codes =
            _mm256_set_m128i(_mm_unpackhi_epi8(hi, lo), _mm_unpacklo_epi8(hi, lo));
        store32(out + b * nrows * 32, _mm256_shuffle_epi8(levels, codes));
      }
      return;
    }
    default:
      return;  // gemm_rows admits only the types above
  }
}

}  // namespace

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
  for (int64_t i = 0; i < nrows; ++i)
    decode_row(t, w + i * row_bytes, nrows, nb, wout + i * 32, d + i, m + i, sc + 2 * i);
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
