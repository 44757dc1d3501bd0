// The int8 GEMM kernel (int8_gemm.h) for CPUs with AVX2 and no AVX-512 VNNI (AMD Zen 2/3, Intel
// before Ice Lake; also the AVX-VNNI client CPUs, which have no 256-bit GEMM of their own yet):
// 3 rows x 16 tokens per tile (a packed token panel, as for AVX-512, in two ymm of 8 tokens' 4
// activation bytes), each row's 4 weight bytes broadcast from memory against them.
//
// AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pair
// sums, and vpmaddwd with ones widens the pairs to int32. The decoded weights therefore take one
// of two forms, chosen so that no pair sum can saturate (every block sum is exact, as the scalar
// reference's):
//   - nibble types (Q4_0, Q4_1, Q4_K): the raw nibble u in 0..15 as the unsigned operand. A pair
//     sum is at most 2 * 15 * 127 = 3810, so the 8 groups of a block are summed in int16
//     (8 * 3810 = 30480 < 2^15) and widened once per block: two instructions per 32 products.
//     Q4_0's w = u - 8: its -8 * sum(q) is the packed -128 * sum(q) shifted right by 4 (exact).
//   - signed types (Q8_0, NF4): |w| as the unsigned operand and w's sign moved onto the tokens'
//     bytes (vpsignb), as llama.cpp does; a pair sum is at most 2 * 128 * 127 = 32512, so each is
//     widened at once. |q| <= 127 (quantize_activations), so negating a token byte never wraps.
// Status: executed on AMD Zen 3 (session 25): bit for bit the scalar reference (test_quant_int8).
#include "core/int8_gemm_kernel.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace medtune::int8_detail {
namespace {

constexpr int kGroups = 8;                     // 4-byte groups per block of 32
constexpr int64_t kPanel = int8::kGemmTokens;  // tokens per packed panel (16)
constexpr int64_t kHalf = 8;                   // tokens per ymm: one tile's tokens

enum class Form { kNibble, kNibbleMinus8, kSigned };

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
                float* m) {
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

Form form_of(DType t) {
  if (t == DType::Q4_0) return Form::kNibbleMinus8;
  if (t == DType::Q4_1 || t == DType::Q4_K) return Form::kNibble;
  return Form::kSigned;
}

// Rows [r0, r0 + R) against the 8 * TV tokens of panel p from its half h on (8 per ymm); writes
// the first `valid` of them.
template <int R, int TV, Form F, bool kMin>
void tile(const DecodedRows& rw, int64_t r0, const int8::PackedTokens& x, int64_t p, int64_t h,
          int64_t valid, float* y, int64_t y_stride) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][TV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) acc[i][v] = _mm256_setzero_ps();
  const int64_t nb = x.nb;
  const int64_t cell0 = p * nb;  // the panel's block 0
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = x.q.data() + (cell0 + b) * kGroups * kPanel * 4 + h * kHalf * 4;
    const int64_t c0 = b * rw.nrows + r0;  // row r0's cell in block b
    // The block's sums: int16 pair sums (nibble forms), int32 (signed form).
    __m256i s[R][TV];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) s[i][v] = _mm256_setzero_si256();
    // Unrolled by 2 only: fully unrolled, GCC 12 regrouped the (associative) int16 sums into a
    // tree, computed every product first and spilled most of them to the stack.
#pragma GCC unroll 2
    for (int g = 0; g < kGroups; ++g) {
      __m256i a[TV];
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v)
        a[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + g * kPanel * 4 + v * kHalf * 4));
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        int32_t w4;
        std::memcpy(&w4, rw.w + (c0 + i) * 32 + 4 * g, 4);
        const __m256i wb = _mm256_set1_epi32(w4);  // the row's 4 bytes, beside each token's 4
#pragma GCC unroll 2
        for (int v = 0; v < TV; ++v) {
          if constexpr (F == Form::kSigned) {
            const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wb, wb), _mm256_sign_epi8(a[v], wb));
            s[i][v] = _mm256_add_epi32(s[i][v], _mm256_madd_epi16(pairs, ones));
          } else {
            s[i][v] = _mm256_add_epi16(s[i][v], _mm256_maddubs_epi16(wb, a[v]));
          }
        }
      }
    }
    const int64_t tok = (cell0 + b) * kPanel + h * kHalf;  // the tile's first token in d, comp
    __m256 dx[TV];
    __m256i minus8[TV];  // Q4_0: -8 * sum(q) per token, from the packed -128 * sum(q)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) {
      dx[v] = _mm256_loadu_ps(x.d.data() + tok + v * kHalf);
      minus8[v] = _mm256_setzero_si256();
      if constexpr (F == Form::kNibbleMinus8)
        minus8[v] = _mm256_srai_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.comp.data() + tok + v * kHalf)), 4);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 dw = _mm256_set1_ps(rw.d[c0 + i]);
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) {
        __m256i isum = s[i][v];
        if constexpr (F != Form::kSigned) isum = _mm256_madd_epi16(isum, ones);
        if constexpr (F == Form::kNibbleMinus8) isum = _mm256_add_epi32(isum, minus8[v]);
        acc[i][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[v]), _mm256_cvtepi32_ps(isum), acc[i][v]);
      }
    }
  }
  if constexpr (kMin) {  // macc = fma(m_w, s_x, macc) over the blocks in order, then acc + macc
    __m256 macc[R][TV];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) macc[i][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const float* sp = x.s.data() + (cell0 + b) * kPanel + h * kHalf;
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256 mw = _mm256_set1_ps(rw.m[b * rw.nrows + r0 + i]);
#pragma GCC unroll 2
        for (int v = 0; v < TV; ++v)
          macc[i][v] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(sp + v * kHalf), macc[i][v]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) acc[i][v] = _mm256_add_ps(acc[i][v], macc[i][v]);
  }
  // Out: y holds tokens in rows; the R x 8TV tile goes through a small buffer.
  alignas(32) float out[R][TV * kHalf];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) _mm256_store_ps(out[i] + v * kHalf, acc[i][v]);
  float* yp = y + (p * kPanel + h * kHalf) * y_stride + r0;
  for (int64_t k = 0; k < valid; ++k)
    for (int i = 0; i < R; ++i) yp[k * y_stride + i] = out[i][k];
}

// Tiles of 3 rows x 16 tokens: 6 sums + 6 accumulators + 2 token vectors + a broadcast in the 16
// ymm registers. Measured on Zen 3 (5 alternating runs, one thread) against 4 x 8: ~1.3x for Q4_1
// and Q8_0. A panel's last 8 tokens or fewer take 3 x 8 tiles, leftover rows 1-row tiles.
template <Form F, bool kMin>
void run(const DecodedRows& rw, const int8::PackedTokens& x, float* y, int64_t y_stride) {
  constexpr int R = 3;
  for (int64_t p = 0; p < x.panels; ++p) {
    const int64_t valid = std::min<int64_t>(kPanel, x.ntok - p * kPanel);
    int64_t r = 0;
    if (valid > kHalf) {
      for (; r + R <= rw.nrows; r += R) tile<R, 2, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
      for (; r < rw.nrows; ++r) tile<1, 2, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
    } else {
      for (; r + R <= rw.nrows; r += R) tile<R, 1, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
      for (; r < rw.nrows; ++r) tile<1, 1, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
    }
  }
}

}  // namespace

void decode_rows_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                      uint8_t* wout, float* d, float* m) {
  for (int64_t i = 0; i < nrows; ++i)
    decode_row(t, w + i * row_bytes, nrows, nb, wout + i * 32, d + i, m + i);
}

void gemm_avx2(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
               int64_t y_stride) {
  switch (form_of(t)) {
    case Form::kSigned:
      return run<Form::kSigned, false>(rows, x, y, y_stride);
    case Form::kNibbleMinus8:
      return run<Form::kNibbleMinus8, false>(rows, x, y, y_stride);
    case Form::kNibble:  // Q4_1 and Q4_K: both have mins
      return run<Form::kNibble, true>(rows, x, y, y_stride);
  }
}

}  // namespace medtune::int8_detail
#else
namespace medtune::int8_detail {
// Never selected off x86 (gemm_available() is false there); the symbols must exist.
void decode_rows_avx2(DType, const uint8_t*, int64_t, int64_t, int64_t, uint8_t*, float*, float*) {}
void gemm_avx2(DType, const DecodedRows&, const int8::PackedTokens&, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
