// The fixed-order attention's scores against transposed keys and its weighted values
// (attention_keys16.h) on AVX-512. Status: the scores executed on AMD Zen 4 (session 34), the
// weighted values on the Intel Xeon (session 49): bit for bit attention.cpp's one_score and
// group_weighted_values (test_ops FixedOrderAttention, which compares a prompt's queries with the
// same queries decoded one at a time through the per-query path's row-major keys and AVX2 loops).
#include "ops/cpu/attention_keys16.h"

#if defined(__x86_64__)
// GCC 12 reports -W(maybe-)uninitialized inside the unmasked forms of several AVX-512 intrinsics
// (_mm512_cvtps_epi32, _mm512_reduce_max_ps: their _mm512_undefined_*() pass-through operands,
// which those forms never read), as in int8_gemm_avx512vnni.cpp: false positives of the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/transpose8_avx.h"

namespace medtune::ops::detail {
namespace {

inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Keys [j0, j0 + 8) (those from n on as zeros) into their block's lanes j0 % 16 .. + 7, eight
// dimensions at a time: eight rows in, one 8 x 8 transpose, eight half-rows of the block out.
template <typename E>
void transpose_eight(float* kt, const E* kb, int64_t kv_stride, int64_t j0, int64_t n, int64_t HD) {
  float* block = kt + (j0 / kKeyBlock) * HD * kKeyBlock + j0 % kKeyBlock;
  for (int64_t c = 0; c < HD; c += 8) {
    __m256 r[8];
    for (int64_t i = 0; i < 8; ++i)
      r[i] = j0 + i < n ? load8(kb + (j0 + i) * kv_stride + c) : _mm256_setzero_ps();
    simd::transpose8(r);
    for (int64_t l = 0; l < 8; ++l) _mm256_storeu_ps(block + (c + l) * kKeyBlock, r[l]);
  }
}

template <typename E>
void transpose_all(float* kt, const E* kb, int64_t kv_stride, int64_t n, int64_t HD) {
  const int64_t end = (n + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  for (int64_t j0 = 0; j0 < end; j0 += 8) transpose_eight(kt, kb, kv_stride, j0, n, HD);
}

// Q queries' scores against the 16 keys of one block (kt at the block): lane sums acc[i][l] over
// dimensions d = l mod 8 in order, then one_score's tree and scale.
template <int Q>
void block_scores(float* const* out, int64_t j0, const float* q, int64_t q_stride, const float* kt,
                  int64_t HD, __m512 scale) {
  __m512 acc[Q][8];
#pragma GCC unroll 8
  for (int i = 0; i < Q; ++i)
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) acc[i][l] = _mm512_setzero_ps();
  for (int64_t c = 0; c < HD; c += 8)
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      __m512 k = _mm512_loadu_ps(kt + (c + l) * kKeyBlock);
      // Opaque to the compiler, so that k stays in a register and each query's element comes in
      // as the FMA's broadcast memory operand ({1to16}): GCC 12 otherwise read k from memory
      // once per query and broadcast the elements by separate instructions (2 loads per FMA).
      asm("" : "+v"(k));
#pragma GCC unroll 2
      for (int i = 0; i < Q; ++i)
        acc[i][l] = _mm512_fmadd_ps(_mm512_set1_ps(q[i * q_stride + c + l]), k, acc[i][l]);
    }
#pragma GCC unroll 2
  for (int i = 0; i < Q; ++i) {
    const __m512 lo =
        _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3]));
    const __m512 hi =
        _mm512_add_ps(_mm512_add_ps(acc[i][4], acc[i][5]), _mm512_add_ps(acc[i][6], acc[i][7]));
    _mm512_storeu_ps(out[i] + j0, _mm512_mul_ps(_mm512_add_ps(lo, hi), scale));
  }
}

// weighted_values16 for P chunk pairs (16 floats each) of the value rows at once: G * P
// accumulators (at most 16), each key's P zmm loaded once for the G queries and each weight
// broadcast once for the P chunk pairs.
template <int G, int P>
void values_pass(float* o, int64_t o_stride, const float* const* p, int step, const float* vt,
                 int64_t plane, int64_t n0) {
  __m512 acc[G][P];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) acc[i][c] = _mm512_setzero_ps();
  const auto add = [&](int i, int64_t j, const __m512* x) {
    const __m512 w = _mm512_set1_ps(p[i][j]);
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) acc[i][c] = _mm512_fmadd_ps(w, x[c], acc[i][c]);
  };
  for (int64_t j = 0; j < n0; ++j) {
    __m512 x[P];
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) x[c] = _mm512_loadu_ps(vt + c * plane + 16 * j);
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) add(i, j, x);
  }
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    for (int64_t j = n0; j < n0 + step * i; ++j) {
      __m512 x[P];
#pragma GCC unroll 4
      for (int c = 0; c < P; ++c) x[c] = _mm512_loadu_ps(vt + c * plane + 16 * j);
      add(i, j, x);
    }
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) _mm512_storeu_ps(o + i * o_stride + 16 * c, acc[i][c]);
  }
}

template <int G>
void values_passes(float* o, int64_t o_stride, const float* const* p, int step, const float* vt,
                   int64_t plane, int64_t n0, int64_t HD) {
  const int64_t pairs = HD / 16;
  for (int64_t c2 = 0; c2 < pairs; c2 += 4) {
    float* oc = o + 16 * c2;
    const float* vc = vt + c2 * plane;
    switch (std::min<int64_t>(4, pairs - c2)) {
      case 1:
        values_pass<G, 1>(oc, o_stride, p, step, vc, plane, n0);
        break;
      case 2:
        values_pass<G, 2>(oc, o_stride, p, step, vc, plane, n0);
        break;
      case 3:
        values_pass<G, 3>(oc, o_stride, p, step, vc, plane, n0);
        break;
      default:
        values_pass<G, 4>(oc, o_stride, p, step, vc, plane, n0);
        break;
    }
  }
}

// vec_exp.h's exp8 on 16 lanes, operation for operation (its comments say why each is there):
// every lane gets exp8's bits. Here and not from vec_exp.h, whose inline functions have external
// linkage: compiled with this file's AVX-512 flags, the linker could pick them for the AVX2 code.
inline __m512 exp16(__m512 x) {
  const __m512 max_x = _mm512_set1_ps(88.72283935546875f);
  const __m512 min_x = _mm512_set1_ps(-87.33654022216797f);
  const __mmask16 too_big = _mm512_cmp_ps_mask(x, max_x, _CMP_GT_OQ);
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, min_x, _CMP_LT_OQ);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, min_x), max_x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(126)), 23);
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(e)), _mm512_set1_ps(2.0f));
  y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~too_small), y);  // exp8's andnot: +0
  y = _mm512_mask_mov_ps(y, too_big, _mm512_set1_ps(INFINITY));
  return _mm512_mask_mov_ps(y, is_nan, x);
}

}  // namespace

void softmax_row16(float* row, int64_t n, const uint8_t* valid) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  // Lanes `lanes` of the row from c: hidden keys set to -inf in the row (as row_max does), then
  // into the maximum. The maximum is exact, so any order gives row_max's value (both skip NaNs:
  // max returns its second operand, the running maximum, when the first is NaN).
  __m512 m = neg_inf;
  const auto chunk = [&](int64_t c, __mmask16 lanes) {
    __m512 v = _mm512_mask_loadu_ps(neg_inf, lanes, row + c);
    if (valid != nullptr) {
      const __m128i bytes = _mm_maskz_loadu_epi8(lanes, valid + c);
      const __mmask16 hidden =
          _mm512_mask_cmpeq_epi32_mask(lanes, _mm512_cvtepu8_epi32(bytes), _mm512_setzero_si512());
      v = _mm512_mask_mov_ps(v, hidden, neg_inf);
      _mm512_mask_storeu_ps(row + c, hidden, v);
    }
    m = _mm512_max_ps(v, m);
  };
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) chunk(c, 0xFFFF);
  if (c < n) chunk(c, static_cast<__mmask16>((1u << (n - c)) - 1));
  const float mx = _mm512_reduce_max_ps(m);
  float sum = 0;
  if (mx != kNegInf) {
    const __m512 s = _mm512_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    c = 0;
    for (; c + 16 <= n; c += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + c), s));
      _mm512_storeu_ps(row + c, e);
      acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
      acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    }
    // The rest: a last 8-float chunk into the lane sums, then single elements, as exp_shifted_sum.
    const int64_t rest = n - c;
    if (rest > 0) {
      const auto mask = static_cast<__mmask16>((1u << rest) - 1);
      const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row + c), s));
      _mm512_mask_storeu_ps(row + c, mask, e);
      if (rest >= 8) acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (const float l : lanes) sum += l;
    for (int64_t t = c + (rest >= 8 ? 8 : 0); t < n; ++t) sum += row[t];
  }
  if (sum > 0) {
    const __m512 inv = _mm512_set1_ps(1.0f / sum);
    for (c = 0; c + 16 <= n; c += 16)
      _mm512_storeu_ps(row + c, _mm512_mul_ps(_mm512_loadu_ps(row + c), inv));
    if (c < n) {
      const auto tail = static_cast<__mmask16>((1u << (n - c)) - 1);
      _mm512_mask_storeu_ps(row + c, tail,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + c), inv));
    }
  } else {
    std::fill(row, row + n, 0.0f);
  }
}

void transpose_keys16(float* kt, const float* kb, int64_t kv_stride, int64_t n, int64_t HD) {
  transpose_all(kt, kb, kv_stride, n, HD);
}

void transpose_keys16(float* kt, const uint16_t* kb, int64_t kv_stride, int64_t n, int64_t HD) {
  transpose_all(kt, kb, kv_stride, n, HD);
}

void scores_keys16(float* const* scores, int G, const float* q, int64_t q_stride, const float* kt,
                   int64_t n, int64_t HD, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  // Two queries per pass (16 accumulators; each block's keys, HD * 64 bytes, stay in L1 for the
  // second pair).
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const float* block = kt + j0 * HD;
    int i = 0;
    for (; i + 2 <= G; i += 2)
      block_scores<2>(scores + i, j0, q + i * q_stride, q_stride, block, HD, sc);
    if (i < G) block_scores<1>(scores + i, j0, q + i * q_stride, q_stride, block, HD, sc);
  }
}

void weighted_values16(float* o, int64_t o_stride, const float* const* p, int G, int step,
                       const float* vt, int64_t plane, int64_t n0, int64_t HD) {
  switch (G) {
    case 1:
      values_passes<1>(o, o_stride, p, step, vt, plane, n0, HD);
      break;
    case 2:
      values_passes<2>(o, o_stride, p, step, vt, plane, n0, HD);
      break;
    case 3:
      values_passes<3>(o, o_stride, p, step, vt, plane, n0, HD);
      break;
    default:
      values_passes<4>(o, o_stride, p, step, vt, plane, n0, HD);
      break;
  }
}

}  // namespace medtune::ops::detail
#pragma GCC diagnostic pop
#else
namespace medtune::ops::detail {
// Never selected off x86 (keys16_available() is false there); the symbols must exist.
void transpose_keys16(float*, const float*, int64_t, int64_t, int64_t) {}
void transpose_keys16(float*, const uint16_t*, int64_t, int64_t, int64_t) {}
void scores_keys16(float* const*, int, const float*, int64_t, const float*, int64_t, int64_t,
                   float) {}
void weighted_values16(float*, int64_t, const float* const*, int, int, const float*, int64_t,
                       int64_t, int64_t) {}
void softmax_row16(float*, int64_t, const uint8_t*) {}
}  // namespace medtune::ops::detail
#endif
