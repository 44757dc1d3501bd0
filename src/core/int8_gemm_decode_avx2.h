// The int8 GEMM's row decoding (int8_gemm.h's DecodedRows), shared by the 256-bit kernels
// (int8_gemm_avx2.cpp: AVX2 and AVX-VNNI) and the 512-bit one (int8_gemm_avx512vnni.cpp). Both
// store each block's 32 weights as the unsigned operand of vpmaddubsw / vpdpbusd, in one of two
// forms:
//   kPlus128 = false (the 256-bit kernels; int8_gemm_avx2.cpp says why each type takes its form):
//     - nibble types (Q4_0, Q4_1, Q4_K): the raw nibble u in 0..15 (Q4_0's kernel removes the 8);
//     - signed types (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K, Q3_K, IQ4_NL, IQ4_XS, NF4): the integer w of
//       the scalar reference (int8::weight_block) itself; the kernel takes |w| and moves w's sign
//       onto the tokens' bytes.
//   kPlus128 = true (AVX-512): w + 128 for every type (0..255, as vpdpbusd's unsigned operand);
//     the kernel removes 128 * sum(q) per block. Q4_0's w + 128 is its nibble + 120; for the
//     others it is the form above plus 128 (a nibble, or a 5-bit q, is its own w there).
// Also each block's scale d, its min m (Q4_1, Q4_K, Q5_1, Q5_K) and the two scales of 16 (Q6_K,
// Q3_K). Internal linkage for kquant_layout.h's reason; needs AVX2.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/block_bytes_avx2.h"
#include "core/dtype.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8.h"

namespace medtune::int8_detail {
namespace {

inline float decode_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  // Exact, like f16_to_f32, for every non-NaN half; not _cvtsh_ss, for quant_int8_body.h's reason.
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// 16 packed bytes -> 32 bytes: low nibbles are elements 0..15, high nibbles 16..31. Not
// block_bytes::nibbles32, which the row kernels take (and q5_values / iq4_values, so the Q5 and
// IQ4 rows here): each row is decoded once for 16 tokens, and with it Q4_1 prompts were 2% slower
// (Zen 3, 5 alternating rounds, medians 1247 against 1273-1282 tokens/s; within this machine's
// noise for the Q5 and IQ4 files, not separated).
inline __m256i decode_nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

// One row's nb blocks into cell (b, i) of the layout: out + (b * nrows) * 32, d + b * nrows,
// m + b * nrows, scales16 + 2 * b * nrows.
template <bool kPlus128>
void decode_row(DType t, const uint8_t* row, int64_t nrows, int64_t nb, uint8_t* out, float* d,
                float* m, int32_t* scales16) {
  // The bytes of the kPlus128 = false form plus `offset` are the kPlus128 = true form (mod 256).
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(!kPlus128          ? 0
                                                            : t == DType::Q4_0 ? 120
                                                                               : 128));
  const auto store = [&](int64_t b, __m256i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * nrows * 32),
                        kPlus128 ? _mm256_add_epi8(v, offset) : v);
  };
  switch (t) {
    case DType::Q8_0:  // w
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 34 * b;
        d[b * nrows] = decode_f16(blk);
        store(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
      }
      return;
    case DType::Q4_0:  // the nibble (w = nibble - 8)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 18 * b;
        d[b * nrows] = decode_f16(blk);
        store(b, decode_nibbles(blk + 2));
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 20 * b;
        d[b * nrows] = decode_f16(blk);
        m[b * nrows] = decode_f16(blk + 2);
        store(b, decode_nibbles(blk + 4));
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K: {  // sub-block k: (d * sc_k) q - dmin * m_k; q 0..15 (Q4_K) or 0..31 (Q5_K)
      const int64_t bytes = t == DType::Q4_K ? kquant::kQ4KBytes : block_bytes::kQ5KBytes;
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + bytes * sb;
        const float dd = decode_f16(blk), dmin = decode_f16(blk + 2);
        for (int k = 0; k < 8; ++k) {
          uint8_t sc, mn;
          kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd * static_cast<float>(sc);
          m[b * nrows] = -(dmin * static_cast<float>(mn));
          store(b, t == DType::Q4_K ? block_bytes::q4k_values(blk, k)
                                    : block_bytes::q5k_values(blk, k));
        }
      }
      return;
    }
    case DType::Q5_0:  // w = q - 16
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_0Bytes * b;
        d[b * nrows] = decode_f16(blk);
        store(b, _mm256_sub_epi8(block_bytes::q5_values(blk + 2, blk + 6), _mm256_set1_epi8(16)));
      }
      return;
    case DType::Q5_1:  // q (0..31)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_1Bytes * b;
        d[b * nrows] = decode_f16(blk);
        m[b * nrows] = decode_f16(blk + 2);
        store(b, block_bytes::q5_values(blk + 4, blk + 8));
      }
      return;
    case DType::Q6_K:  // group g of half h: w = q - 32, 2 scales of 16
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ6KBytes * sb;
        const float dd = decode_f16(blk + kquant::kQ6KDOffset);
        const int8_t* scales = reinterpret_cast<const int8_t*>(blk + kquant::kQ6KScaleOffset);
        for (int k = 0; k < 8; ++k) {
          const int h = k / 4, g = k % 4;
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd;
          scales16[2 * b * nrows] = scales[8 * h + 2 * g];
          scales16[2 * b * nrows + 1] = scales[8 * h + 2 * g + 1];
          store(b, block_bytes::q6k_values(blk, h, g));
        }
      }
      return;
    case DType::Q3_K:  // group k of 32: w in -4..3, 2 scales of 16
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ3KBytes * sb;
        const float dd = decode_f16(blk + kquant::kQ3KDOffset);
        for (int k = 0; k < 8; ++k) {
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd;
          scales16[2 * b * nrows] = kquant::q3k_scale(2 * k, blk + kquant::kQ3KScaleOffset) - 32;
          scales16[2 * b * nrows + 1] =
              kquant::q3k_scale(2 * k + 1, blk + kquant::kQ3KScaleOffset) - 32;
          store(b, block_bytes::q3k_values(blk, k));
        }
      }
      return;
    case DType::IQ4_NL:  // w = the table value
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + kquant::kIq4nlBytes * b;
        d[b * nrows] = decode_f16(blk);
        store(b, block_bytes::iq4_values(blk + 2));
      }
      return;
    case DType::IQ4_XS:  // group k of 32: w = the table value, d * (scale - 32)
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kIq4xsBytes * sb;
        const float dd = decode_f16(blk);
        for (int k = 0; k < 8; ++k) {
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd * static_cast<float>(kquant::iq4xs_scale(k, blk) - 32);
          store(b, block_bytes::iq4_values(blk + kquant::kIq4xsQsOffset + 16 * k));
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
        store(b, _mm256_shuffle_epi8(levels, _mm256_set_m128i(_mm_unpackhi_epi8(hi, lo),
                                                              _mm_unpacklo_epi8(hi, lo))));
      }
      return;
    }
    default:
      return;  // gemm_rows admits only the types above
  }
}

// Rows i = 0..nrows-1 (row_bytes apart from w) into the layout above.
template <bool kPlus128>
void decode_rows(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                 uint8_t* wout, float* d, float* m, int32_t* sc) {
  for (int64_t i = 0; i < nrows; ++i)
    decode_row<kPlus128>(t, w + i * row_bytes, nrows, nb, wout + i * 32, d + i, m + i, sc + 2 * i);
}

}  // namespace
}  // namespace medtune::int8_detail
