// The int8 GEMM kernel (int8_gemm.h), AVX-512 VNNI on 512-bit registers: R rows x 16 tokens per
// tile, the 16 tokens' activations of a block (8 zmm) loaded once and used by the R rows, each
// row's 4 weight bytes broadcast from memory into vpdpbusd. Status: executed on AMD Zen 4 (session
// 24): bit for bit the scalar reference (test_int8_gemm).
#include "core/int8_gemm_kernel.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
// GCC 12 reports -Wmaybe-uninitialized inside _mm512_cvtepi32_ps (its _mm512_undefined_ps()
// pass-through operand, which the unmasked form never reads): a false positive of the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/int8_gemm_decode_avx2.h"
#include "core/transpose8_avx.h"

namespace medtune::int8_detail {
namespace {

constexpr int kGroups = 8;  // 4-byte groups per block of 32
constexpr int64_t kTok = int8::kGemmTokens;

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
  const int64_t tiles = x.panels * (rw.nrows / R + rw.nrows % R);
  int64_t k = 0;  // tiles done
  for (int64_t p = 0; p < x.panels; ++p) {
    const int64_t valid = std::min<int64_t>(kTok, x.ntok - p * kTok);
    int64_t r = 0;
    for (; r + R <= rw.nrows; r += R) {
      prefetch_share(rw, k++, tiles);
      tile<R, kMin, kScaled>(rw, r, x, p, valid, y, y_stride);
    }
    for (; r < rw.nrows; ++r) {
      prefetch_share(rw, k++, tiles);
      tile<1, kMin, kScaled>(rw, r, x, p, valid, y, y_stride);
    }
  }
}

}  // namespace

void decode_rows_avx512vnni(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                            uint8_t* wout, float* d, float* m, int32_t* sc) {
  decode_rows<true>(t, w, row_bytes, nrows, nb, wout, d, m, sc);
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
