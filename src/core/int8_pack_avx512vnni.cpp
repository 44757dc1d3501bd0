// Token panels quantized and packed in one pass on AVX-512 (int8_gemm.h's quantize_pack_panel),
// a cell (16 tokens' block b) at a time: each token's block of 32 in two registers, the 16
// tokens' maxima, divisions, sums and scales side by side in one register each, the bytes and
// sums written straight into the packed layout. The portable version quantizes a token into a
// buffer (a horizontal maximum and two scalar divisions per block), then copies it 4 bytes at a
// time and sums its bytes again (put_token): 5.4% of a Q8_0 prompt's time on Zen 4, 2.8% this
// way. Status: executed on AMD Zen 4 (session 34): the bits of the portable version
// (test_quant_int8 Int8Gemm.PackedTokensHoldTheLayoutBothWays).
#include "core/int8_gemm_kernel.h"

#if defined(__x86_64__)
// GCC 12 reports -Wmaybe-uninitialized and -Wuninitialized inside the unmasked AVX-512
// intrinsics (their _mm512_undefined_ps() pass-through operand, never read):
// int8_gemm_avx512vnni.cpp's false positive of the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace medtune::int8_detail {
namespace {

constexpr int kGroups = 8;  // 4-byte groups per block of 32
constexpr int64_t kTok = int8::kGemmTokens;

// Group g of a lane: 4 bytes, 64 bytes after group g - 1's.
inline void store_group(int8_t* q, int g, int32_t v) {
  std::memcpy(q + g * kTok * 4, &v, 4);
}

// Lane t of the result = op over the 16 lanes of v[t] (v is overwritten). A tree that never
// mixes two inputs: each stage pairs the vectors and halves the lanes each input keeps (8, 4, 2,
// 1), so a NaN in one token's lanes stays in that token's. For max and for integer sums the
// order does not change the result. ~3 instructions per input instead of a horizontal reduction
// (~8, on a long dependency chain) per token and block.
template <typename Op>
__m512 reduce16(__m512* v, Op op) {
  for (int i = 0; i < 8; ++i)  // v[i]: input 2i's 8 partials, then input 2i + 1's
    v[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)  // 128-bit lane L of v[i]: input 4i + L's 4 partials
    v[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i) {  // lane L of v[i]: inputs 8i + L and 8i + 4 + L, 2 partials each
    const __m512d a = _mm512_castps_pd(v[2 * i]), b = _mm512_castps_pd(v[2 * i + 1]);
    v[i] =
        op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Element 4L + j: input 4j + L; the permutation puts input t at element t.
  const __m512 r = op(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

// One cell (panel p's 16 tokens, block b; x at token 0's block, tokens cols floats apart, the
// first `real` of them present): quantize_block_scalar's operations per token (quant_int8.cpp:
// the maximum of |x|, exact in any order; d = amax / 127 and its reciprocal, correctly rounded
// divisions in any width; products, round-half-even and clamps in the operand order that gives
// std::max/std::min's result for a NaN product; a non-finite block packs as q = 0, d = s = NaN),
// the 16 tokens' divisions, sums and scales in one register each; padding lanes pack as zeros.
void quantize_cell(const float* x, int64_t cols, int64_t real, int64_t cell,
                   int8::PackedTokens* out) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 part[kTok];    // token t's |x| maxima over its two halves, then its q sums (as int32)
  unsigned finite = 0;  // bit t: token t's block is finite (padding counts: zeros)
  for (int64_t t = 0; t < kTok; ++t) {
    if (t >= real) {
      part[t] = zero;
      finite |= 1u << t;
      continue;
    }
    const __m512 v0 = _mm512_loadu_ps(x + t * cols), v1 = _mm512_loadu_ps(x + t * cols + 16);
    // v * 0 == 0 holds exactly for the finite values (inf * 0 and NaN * 0 are NaN).
    const __mmask16 f = _mm512_cmp_ps_mask(_mm512_mul_ps(v0, zero), zero, _CMP_EQ_OQ) &
                        _mm512_cmp_ps_mask(_mm512_mul_ps(v1, zero), zero, _CMP_EQ_OQ);
    if (f == 0xFFFF) finite |= 1u << t;
    part[t] = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
  }
  const auto max = [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); };
  const __m512 d = _mm512_div_ps(reduce16(part, max), _mm512_set1_ps(127.0f));
  const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, zero, _CMP_NEQ_UQ),
                                        _mm512_set1_ps(1.0f), d);  // d != 0 ? 1 / d : 0
  alignas(64) float ids[kTok];
  _mm512_store_ps(ids, id);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  int8_t* q = out->q.data() + cell * kGroups * kTok * 4;  // lane t's group g at q + 4t + 64g
  for (int64_t t = 0; t < kTok; ++t) {
    int8_t* qt = q + 4 * t;
    if (t >= real || (finite >> t & 1) == 0) {
      for (int g = 0; g < kGroups; ++g) store_group(qt, g, 0);
      part[t] = zero;  // sum 0: comp 0
      continue;
    }
    const __m512 it = _mm512_set1_ps(ids[t]);
    const auto quantize = [&](const float* v) {
      const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(v), it),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));  // integral: exact
    };
    const __m512i i0 = quantize(x + t * cols), i1 = quantize(x + t * cols + 16);
    part[t] = _mm512_castsi512_ps(_mm512_add_epi32(i0, i1));
    // Elements 0-15 and 16-31 as bytes (|q| <= 127: the truncating narrow is exact).
    const __m128i b0 = _mm512_cvtepi32_epi8(i0), b1 = _mm512_cvtepi32_epi8(i1);
    store_group(qt, 0, _mm_cvtsi128_si32(b0));
    store_group(qt, 1, _mm_extract_epi32(b0, 1));
    store_group(qt, 2, _mm_extract_epi32(b0, 2));
    store_group(qt, 3, _mm_extract_epi32(b0, 3));
    store_group(qt, 4, _mm_cvtsi128_si32(b1));
    store_group(qt, 5, _mm_extract_epi32(b1, 1));
    store_group(qt, 6, _mm_extract_epi32(b1, 2));
    store_group(qt, 7, _mm_extract_epi32(b1, 3));
  }
  const auto add = [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  };
  const __m512i sum = _mm512_castps_si512(reduce16(part, add));
  const auto nonfinite = static_cast<__mmask16>(~finite);
  const __m512 nan = _mm512_set1_ps(std::nanf(""));
  const auto at = static_cast<size_t>(cell * kTok);
  _mm512_storeu_si512(out->comp.data() + at, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-128)));
  _mm512_storeu_ps(out->d.data() + at, _mm512_mask_mov_ps(d, nonfinite, nan));
  _mm512_storeu_ps(out->s.data() + at,
                   _mm512_mask_mov_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(sum)), nonfinite, nan));
}

}  // namespace

void quantize_pack_panel_avx512vnni(const float* x, int64_t p, int8::PackedTokens* out) {
  const int64_t nb = out->nb, cols = nb * 32;
  const int64_t real = std::min(kTok, out->ntok - p * kTok);  // lanes with a token
  for (int64_t b = 0; b < nb; ++b)
    quantize_cell(x + p * kTok * cols + b * 32, cols, real, p * nb + b, out);
}

}  // namespace medtune::int8_detail
#pragma GCC diagnostic pop
#else
namespace medtune::int8_detail {
// Never selected off x86 (gemm_available() is false there); the symbol must exist.
void quantize_pack_panel_avx512vnni(const float*, int64_t, int8::PackedTokens*) {}
}  // namespace medtune::int8_detail
#endif
