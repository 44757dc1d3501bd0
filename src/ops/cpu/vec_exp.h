// exp over float arrays, 8 lanes at a time (AVX2 + FMA), for the softmaxes of attention and
// cross-entropy and for SiLU (and their rows' max, row_max below): glibc's expf is a scalar call
// (~4 ns each), and a training step of SmolLM2 at 4 x 256 tokens takes ~2e8 of them.
//
// The vector exp is Cephes' expf (the algorithm of avx_mathfun and many BLAS-adjacent libraries):
// n = round(x / ln 2), r = x - n ln 2 in two steps (Cody-Waite), exp(r) by a degree-6 polynomial,
// times 2^n built in the exponent bits. Error <= 2 ulp over the normal range (checked against
// std::exp in tests/unit/ops). Special cases as std::exp: exp(-inf) = 0 (masked scores),
// exp(x > 88.72) = +inf, NaN stays NaN; results below ~2^-125 (x < -86.6) flush to 0 instead of
// tiny or subnormal values (an absolute difference under 3e-38, nothing next to a softmax's sum).
// Every lane is computed the same way, whatever its position, so the result of an element does
// not depend on where an array starts or ends (tails go through the same kernel).
// Compiled for the build's baseline, not dispatched: it is inlined into the softmax and SiLU loops,
// whose numerics were validated with it. The default baseline (x86-64-v3) always has AVX2 + FMA;
// a build for an older baseline (-DMEDTUNE_X86_BASELINE=x86-64-v2) falls back to std::exp, which
// rounds differently (docs/decisions/cpu-dispatch.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#define MEDTUNE_VEC_EXP 1
#include <immintrin.h>
#else
#define MEDTUNE_VEC_EXP 0
#endif

namespace medtune::ops::detail {

// Elements per block where an elementwise op first takes the exps of a block into a stack
// buffer (1 KiB), then finishes elementwise.
constexpr int64_t kExpBlock = 256;

#if MEDTUNE_VEC_EXP
inline __m256 exp8(__m256 x) {
  const __m256 max_x = _mm256_set1_ps(88.72283935546875f);   // ln(FLT_MAX): above, +inf
  const __m256 min_x = _mm256_set1_ps(-87.33654022216797f);  // ln(FLT_MIN): below, 0
  const __m256 too_big = _mm256_cmp_ps(x, max_x, _CMP_GT_OQ);
  const __m256 too_small = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, min_x), max_x);
  // n = round(x * log2(e)); r = x - n * ln2 with ln2 split so that n * ln2_hi is exact.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n = 2 * 2^(n-1), n in [-126, 128], so that n = 128 (x near ln(FLT_MAX)) stays finite;
  // n = -126 gives exponent bits 0, i.e. 0 (the flush below ~2^-125).
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
  y = _mm256_andnot_ps(too_small, y);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), too_big);
  return _mm256_blendv_ps(y, x, is_nan);
}

// The same kernel for one value (array tails), so that every element rounds alike.
inline float exp1(float x) { return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x))); }
#else
inline float exp1(float x) { return std::exp(x); }
#endif

// row[c] = exp(row[c] - shift) for c < n; returns the fp32 sum of the results.
inline float exp_shifted_sum(float* row, int64_t n, float shift) {
  int64_t c = 0;
  float sum = 0;
#if MEDTUNE_VEC_EXP
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; c + 8 <= n; c += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + c), s));
    _mm256_storeu_ps(row + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; c < n; ++c) {
    row[c] = exp1(row[c] - shift);
    sum += row[c];
  }
  return sum;
}

// out[v] = exp(z[v] - shift) for v < n (out may be z); returns the sum of the results in double.
inline double exp_shifted_sum_f64(float* out, const float* z, int64_t n, float shift) {
  int64_t v = 0;
  double sum = 0;
#if MEDTUNE_VEC_EXP
  const __m256 s = _mm256_set1_ps(shift);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  for (; v + 8 <= n; v += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + v), s));
    _mm256_storeu_ps(out + v, e);
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  for (double l : lanes) sum += l;
#endif
  for (; v < n; ++v) {
    out[v] = exp1(z[v] - shift);
    sum += static_cast<double>(out[v]);
  }
  return sum;
}

// out[i] = exp(-x[i]) for i < n (out may be x).
inline void exp_neg(float* out, const float* x, int64_t n) {
  int64_t i = 0;
#if MEDTUNE_VEC_EXP
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_xor_ps(_mm256_loadu_ps(x + i), sign)));
#endif
  for (; i < n; ++i) out[i] = exp1(-x[i]);
}

// The largest of row[0, n), ignoring NaNs (as the scalar loop below): 8 lanes at a time. A max is
// exact, so any order gives the same value; only the sign of a zero maximum may differ from the
// scalar loop's, and s - (+0) and s - (-0) are the same for every s that is subtracted from it.
// With `valid` (n bytes), key c counts only where valid[c] != 0 and the others are set to -inf
// (padding in a cache: the caller has checked that every key is causally visible). The scalar
// loop was a serial chain of maxss: ~10% of the int8 route's prompt attention (perf), and as much
// again with a key mask (generation's prompts).
inline float row_max(float* row, int64_t n, float init, const uint8_t* valid) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t c = 0;
  float mx = init;
#if MEDTUNE_VEC_EXP
  if (n >= 8) {
    __m256 acc = _mm256_set1_ps(init);
    const __m256 neg_inf = _mm256_set1_ps(kNegInf);
    for (; c + 8 <= n; c += 8) {
      __m256 v = _mm256_loadu_ps(row + c);
      if (valid != nullptr) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(valid + c));
        const __m256i hidden =
            _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setzero_si256());
        v = _mm256_blendv_ps(v, neg_inf, _mm256_castsi256_ps(hidden));
        _mm256_storeu_ps(row + c, v);
      }
      // max(x, acc) returns acc when x is NaN: the lane keeps its maximum, as the scalar loop does.
      acc = _mm256_max_ps(v, acc);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (const float v : lanes) mx = v > mx ? v : mx;
  }
#endif
  for (; c < n; ++c) {
    if (valid != nullptr && valid[c] == 0) row[c] = kNegInf;
    mx = row[c] > mx ? row[c] : mx;
  }
  return mx;
}

// row_max of a row that is only read (no key mask).
inline float row_max(const float* row, int64_t n, float init) {
  return row_max(const_cast<float*>(row), n, init, nullptr);  // writes only where valid is given
}

}  // namespace medtune::ops::detail
