// The int8 GEMM kernel (int8_gemm.h), AVX-512 VNNI on 512-bit registers: R rows x 16 tokens per
// tile, the 16 tokens' activations of a block (8 zmm) loaded once and used by the R rows, each
// row's 4 weight bytes broadcast from memory into vpdpbusd. Status: executed on AMD Zen 4 (session
// 24): bit for bit the scalar reference (test_int8_gemm).
#include "core/int8_gemm_kernel.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
// GCC 12 reports -Wmaybe-uninitialized inside _mm512_cvtepi32_ps (its _mm512_undefined_ps()
// pass-through operand, which the unmasked form never reads): a false positive of the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/block_bytes_avx2.h"
#include "core/transpose8_avx.h"

namespace medtune::int8_detail {
namespace {

constexpr int kGroups = 8;  // 4-byte groups per block of 32
constexpr int64_t kTok = int8::kGemmTokens;

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
  const __m256i k128 = _mm256_set1_epi8(static_cast<char>(0x80));
  switch (t) {
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 34 * b;
        d[b * nrows] = f16(blk);
        store32(
            out + b * nrows * 32,
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), k128));
      }
      return;
    case DType::Q4_0:  // w = nibble - 8: stored as nibble + 120
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 18 * b;
        d[b * nrows] = f16(blk);
        store32(out + b * nrows * 32, _mm256_add_epi8(nibbles(blk + 2), _mm256_set1_epi8(120)));
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + 20 * b;
        d[b * nrows] = f16(blk);
        m[b * nrows] = f16(blk + 2);
        store32(out + b * nrows * 32, _mm256_or_si256(nibbles(blk + 4), k128));
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
          store32(out + b * nrows * 32,
                  _mm256_or_si256(_mm256_and_si256(nib, _mm256_set1_epi8(0x0F)), k128));
        }
      }
      return;
    case DType::Q5_0:  // w = q - 16: stored as q + 112
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_0Bytes * b;
        d[b * nrows] = f16(blk);
        store32(out + b * nrows * 32,
                _mm256_add_epi8(block_bytes::q5_values(blk + 2, blk + 6), _mm256_set1_epi8(112)));
      }
      return;
    case DType::Q5_1:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + block_bytes::kQ5_1Bytes * b;
        d[b * nrows] = f16(blk);
        m[b * nrows] = f16(blk + 2);
        store32(out + b * nrows * 32,
                _mm256_or_si256(block_bytes::q5_values(blk + 4, blk + 8), k128));
      }
      return;
    case DType::Q5_K:  // sub-block k: (d * sc_k) q - dmin * m_k
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + block_bytes::kQ5KBytes * sb;
        const float dd = f16(blk), dmin = f16(blk + 2);
        for (int k = 0; k < 8; ++k) {
          uint8_t sc, mn;
          kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd * static_cast<float>(sc);
          m[b * nrows] = -(dmin * static_cast<float>(mn));
          store32(out + b * nrows * 32, _mm256_or_si256(block_bytes::q5k_values(blk, k), k128));
        }
      }
      return;
    case DType::Q6_K:  // group g of half h: w = q - 32, stored as w + 128; 2 scales of 16
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
          store32(out + b * nrows * 32, _mm256_xor_si256(block_bytes::q6k_values(blk, h, g), k128));
        }
      }
      return;
    case DType::Q3_K:  // group k of 32: w in -4..3, stored as w + 128; 2 scales of 16
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* blk = row + kquant::kQ3KBytes * sb;
        const float dd = f16(blk + kquant::kQ3KDOffset);
        for (int k = 0; k < 8; ++k) {
          const int64_t b = 8 * sb + k;
          d[b * nrows] = dd;
          scales16[2 * b * nrows] = kquant::q3k_scale(2 * k, blk + kquant::kQ3KScaleOffset) - 32;
          scales16[2 * b * nrows + 1] =
              kquant::q3k_scale(2 * k + 1, blk + kquant::kQ3KScaleOffset) - 32;
          store32(out + b * nrows * 32, _mm256_xor_si256(block_bytes::q3k_values(blk, k), k128));
        }
      }
      return;
    case DType::NF4: {  // half b % 2 of block b / 2: the codes (high nibble first) -> levels + 128
      alignas(16) uint8_t lut[16];
      for (int i = 0; i < 16; ++i) lut[i] = static_cast<uint8_t>(int8::nf4_levels()[i] + 128);
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

// Rows [r0, r0 + R) against token panel p; writes the panel's `valid` tokens. kMin: the rows have
// mins (rw.m); kScaled: Q6_K or Q3_K, whose block halves (groups 0-3, 4-7) have their own int
// scales.
template <int R, bool kMin, bool kScaled>
void tile(const DecodedRows& rw, int64_t r0, const int8::PackedTokens& x, int64_t p, int64_t valid,
          float* y, int64_t y_stride) {
  // Fully unrolled loops over R and the groups keep acc and macc in registers (without the
  // pragmas GCC 12 kept acc on the stack: a load and a store per row and block).
  __m512 acc[R], macc[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) acc[i] = macc[i] = _mm512_setzero_ps();
  const int64_t nb = x.nb;
  const int8_t* qp = x.q.data() + p * nb * kGroups * kTok * 4;
  const int32_t* cp = x.comp.data() + p * nb * kTok;
  const float* dp = x.d.data() + p * nb * kTok;
  const float* sp = x.s.data() + p * nb * kTok;
  for (int64_t b = 0; b < nb; ++b) {
    __m512i a[kGroups];
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) a[g] = _mm512_loadu_si512(qp + (b * kGroups + g) * kTok * 4);
    const __m512 dx = _mm512_loadu_ps(dp + b * kTok);
    const __m512i comp = _mm512_loadu_si512(cp + b * kTok);
    __m512 sx = _mm512_setzero_ps();
    if constexpr (kMin) sx = _mm512_loadu_ps(sp + b * kTok);
    const int64_t c0 = b * rw.nrows + r0;  // row r0's cell in block b
    const uint8_t* w0 = rw.w + c0 * 32;     // row r0 + i's 32 bytes at w0 + 32 i
    // The R rows' integer sums side by side, group by group: each vpdpbusd depends on the one
    // before it in its own row only, so R independent chains are in flight (row by row, the
    // 8-deep chain of each row was issued back to back). Integer sums: any order, same bits.
    // Q6_K and Q3_K sum each half in its own register (s, then s1), each starting from its half's
    // share of the offset's -128 * sum(q): the tokens' half sums, by vpdpbusd with ones (once for
    // the R rows), against the packed whole-block comp.
    __m512i s[R], s1[R];
    __m512i comp0 = comp, comp1 = comp;
    if constexpr (kScaled) {
      __m512i half = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 0; g < kGroups / 2; ++g)
        half = _mm512_dpbusd_epi32(half, _mm512_set1_epi8(1), a[g]);
      comp0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(half, 7));
      comp1 = _mm512_sub_epi32(comp, comp0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) s[i] = comp0, s1[i] = comp1;
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        // vpdpbusd's unsigned operand: the row's 4 bytes (w + 128), broadcast; signed: 16 tokens'.
        int32_t w4;
        std::memcpy(&w4, w0 + 32 * i + 4 * g, 4);
        __m512i& sum = kScaled && g >= kGroups / 2 ? s1[i] : s[i];
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi32(w4), a[g]);
      }
    if constexpr (kScaled) {  // isum = sc0 * half 0 + sc1 * half 1, exact in int32 (quant_int8.h)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        s[i] =
            _mm512_add_epi32(_mm512_mullo_epi32(s[i], _mm512_set1_epi32(rw.sc[2 * (c0 + i)])),
                             _mm512_mullo_epi32(s1[i], _mm512_set1_epi32(rw.sc[2 * (c0 + i) + 1])));
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(rw.d[c0 + i]), dx);
      acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s[i]), acc[i]);
      if constexpr (kMin) macc[i] = _mm512_fmadd_ps(_mm512_set1_ps(rw.m[c0 + i]), sx, macc[i]);
    }
  }
  // Out: y holds tokens in rows, so the R x 16 tile is transposed in registers (two 8 x 8
  // transposes) and each token's R values stored together. Storing the 16 lanes of each row one by
  // one to 16 token rows took a quarter of the kernel's time (perf, Zen 4).
  __m256 lo[8], hi[8];  // lo[i]: row i's tokens 0-7, hi[i]: 8-15; rows past R are zero
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m512 v = i >= R ? _mm512_setzero_ps() : kMin ? _mm512_add_ps(acc[i], macc[i]) : acc[i];
    lo[i] = _mm512_castps512_ps256(v);
    hi[i] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  }
  simd::transpose8(lo);
  simd::transpose8(hi);
  const __mmask8 rows = static_cast<__mmask8>((1u << R) - 1);
  float* yp = y + p * kTok * y_stride + r0;
  for (int64_t k = 0; k < valid; ++k)
    _mm256_mask_storeu_ps(yp + k * y_stride, rows, k < 8 ? lo[k] : hi[k - 8]);
}

template <bool kMin, bool kScaled>
void run(const DecodedRows& rw, const int8::PackedTokens& x, float* y, int64_t y_stride) {
  // Registers: R accumulators (2R with mins, or R more half sums for Q6_K, Q3_K) + 8 activations +
  // scales < 32.
  constexpr int R = kMin || kScaled ? 6 : 8;
  for (int64_t p = 0; p < x.panels; ++p) {
    const int64_t valid = std::min<int64_t>(kTok, x.ntok - p * kTok);
    int64_t r = 0;
    for (; r + R <= rw.nrows; r += R) tile<R, kMin, kScaled>(rw, r, x, p, valid, y, y_stride);
    for (; r < rw.nrows; ++r) tile<1, kMin, kScaled>(rw, r, x, p, valid, y, y_stride);
  }
}

}  // namespace

void decode_rows_avx512vnni(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                            uint8_t* wout, float* d, float* m, int32_t* sc) {
  for (int64_t i = 0; i < nrows; ++i)
    decode_row(t, w + i * row_bytes, nrows, nb, wout + i * 32, d + i, m + i, sc + 2 * i);
}

void gemm_avx512vnni(const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                     int64_t y_stride) {
  if (rows.m != nullptr)
    run<true, false>(rows, x, y, y_stride);
  else if (rows.sc != nullptr)
    run<false, true>(rows, x, y, y_stride);
  else
    run<false, false>(rows, x, y, y_stride);
}

}  // namespace medtune::int8_detail
#pragma GCC diagnostic pop
#else
namespace medtune::int8_detail {
// Never selected off x86 (gemm_available() is false there); the symbols must exist.
void decode_rows_avx512vnni(DType, const uint8_t*, int64_t, int64_t, int64_t, uint8_t*, float*,
                            float*, int32_t*) {}
void gemm_avx512vnni(const DecodedRows&, const int8::PackedTokens&, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
