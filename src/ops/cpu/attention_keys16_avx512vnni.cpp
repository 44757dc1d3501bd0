// The fixed-order attention's scores against transposed keys (attention_keys16.h) on AVX-512.
// Status: executed on AMD Zen 4 (session 34): every score bit for bit attention.cpp's one_score
// (test_ops FixedOrderAttention, which compares a prompt's queries with the same queries decoded
// one at a time through the per-query path's row-major keys).
#include "ops/cpu/attention_keys16.h"

#if defined(__x86_64__)
#include <immintrin.h>

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

}  // namespace

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

}  // namespace medtune::ops::detail
#else
namespace medtune::ops::detail {
// Never selected off x86 (keys16_available() is false there); the symbols must exist.
void transpose_keys16(float*, const float*, int64_t, int64_t, int64_t) {}
void transpose_keys16(float*, const uint16_t*, int64_t, int64_t, int64_t) {}
void scores_keys16(float* const*, int, const float*, int64_t, const float*, int64_t, int64_t,
                   float) {}
}  // namespace medtune::ops::detail
#endif
