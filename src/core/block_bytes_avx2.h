// The integers of ggml's 5- and 6-bit blocks as the 32 bytes of a ymm, one activation block of 32
// at a time, for the int8 kernels (the row kernels of quant_int8_body.h and the GEMMs' row
// decoding in int8_gemm_<isa>.cpp):
//   Q5_0 22 B: d f16 | qh[4] | qs[16]             value d * (q - 16)
//   Q5_1 24 B: d f16 | m f16 | qh[4] | qs[16]     value d * q + m
//     element e < 16 is the low nibble of qs[e], e >= 16 the high nibble of qs[e - 16]; its fifth
//     bit is bit e of qh (a little-endian uint32).
//   Q5_K 176 B: d f16 | dmin f16 | scales[12] (Q4_K's) | qh[32] | qs[128]
//     sub-block k (0..7) = (d * sc_k) * q - dmin * m_k; its nibbles are the low (k even) or high
//     (k odd) ones of qs[32 * (k / 2) ..], and the fifth bit of its element l is bit k of qh[l].
//   q is 0..31 in every case. ggml's dequantize_row_q5_{0,1,K} read the bits so.
//   Q6_K 210 B: as core/kquant_layout.h says (q6k_value): group g of half h, q - 32 in -32..31.
//   Q3_K 110 B: as core/kquant_layout.h says: group k of 32, q in -4..3.
//   IQ4_NL, IQ4_XS: as core/kquant_layout.h says: nibbles indexing kIq4nlValues.
// core/quant.cpp is the scalar reference; tests/fixtures/quant holds gguf-py's blocks.
// Internal linkage for kquant_layout.h's reason: the files that include this are compiled with
// different -m flags. Needs AVX2.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/kquant_layout.h"

namespace medtune::block_bytes {
namespace {

constexpr int64_t kQ5_0Bytes = 22;
constexpr int64_t kQ5_1Bytes = 24;
constexpr int64_t kQ5KBytes = 176;
constexpr int64_t kQ5KQhOffset = 16;  // after d, dmin and the 12 scale bytes
constexpr int64_t kQ5KQsOffset = 48;

// 16 packed bytes -> 32 bytes: element e < 16 the low nibble of p[e], e >= 16 the high nibble of
// p[e - 16]. The 16 bytes are loaded into both halves at once (vbroadcasti128 from memory: a load,
// no shuffle) and the high half shifted right by 4 in its 32-bit lanes; after the mask each byte
// holds its own nibble (the bits a lane shift brings in from the next byte sit above bit 3). Two
// vector operations where shifting and masking each half, then joining them, took four. SmolLM2
// int8 decode on Zen 3, 2 threads, 4 alternating rounds, medians, tokens/s: Q4_1 177 -> 197,
// Q5_K_M 128 -> 144, IQ4_NL 156 -> 165 (Q8_0, no nibbles: unchanged).
inline __m256i nibbles32(const uint8_t* p) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// Q5_0 / Q5_1: qh (4 bytes) and qs (16 bytes) -> the 32 integers q in element order.
inline __m256i q5_values(const uint8_t* qh, const uint8_t* qs) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // Byte e takes byte e / 8 of qh (vpshufb works within each 128-bit half, and both halves hold
  // qh's 4 bytes), then keeps its bit e % 8: all ones where element e's fifth bit is set.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(nibbles32(qs), _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

// The 32 nibbles of sub-block k of a K-quant super-block whose nibbles start at qs: the low (k
// even) or high (k odd) nibbles of qs[32 * (k / 2) ..]. Q4_K's q, and Q5_K's low 4 bits.
inline __m256i k_nibbles(const uint8_t* qs, int k) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (k / 2)));
  return _mm256_and_si256(k % 2 == 0 ? bytes : _mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0F));
}

// Q4_K: the 32 integers q (0..15) of sub-block k of the super-block at blk.
inline __m256i q4k_values(const uint8_t* blk, int k) {
  return k_nibbles(blk + kquant::kQ4KQsOffset, k);
}

// Q5_K: the 32 integers q of sub-block k of the super-block at blk.
inline __m256i q5k_values(const uint8_t* blk, int k) {
  const __m256i nib = k_nibbles(blk + kQ5KQsOffset, k);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ5KQhOffset));
  const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

// Q6_K: group g (0..3) of half h (0..1) of the super-block at blk, as signed bytes q - 32: the low
// 4 bits from ql (the low nibbles of ql[64h ..] for g 0 and 1 at offsets 0 and 32, the high ones
// for g 2 and 3), the top 2 from bits 2g, 2g+1 of qh[128 + 32h + l].
inline __m256i q6k_values(const uint8_t* blk, int h, int g) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  const __m256i ql =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (g & 1)));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i lo =
      g < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
  // The 2 high bits, masked before the 16-bit shift so nothing crosses into the next byte.
  const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2), 4);
  return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}

// Q3_K: group k (0..7) of 32 of the super-block at blk, as signed bytes -4..3: 2 bits of
// qs[32 (k / 4) + l] at 2 (k % 4), minus 4 unless bit k of hmask[l] is set.
inline __m256i q3k_values(const uint8_t* blk, int k) {
  const __m256i qs = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(blk + kquant::kQ3KQsOffset + 32 * (k / 4)));
  const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
  // The 2 bits, masked after the 16-bit shift so nothing from the next byte stays.
  const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * (k % 4)), _mm256_set1_epi8(3));
  const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
  return _mm256_sub_epi8(q2, _mm256_andnot_si256(set, _mm256_set1_epi8(4)));
}

// IQ4_NL / IQ4_XS: 16 bytes of nibbles (element e < 16 the low nibble of qs[e], e >= 16 the high
// nibble of qs[e - 16]) -> their 32 signed table values kquant::kIq4nlValues[q] (|w| <= 127).
inline __m256i iq4_values(const uint8_t* qs) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kquant::kIq4nlValues)));
  return _mm256_shuffle_epi8(table, nibbles32(qs));
}

}  // namespace
}  // namespace medtune::block_bytes
