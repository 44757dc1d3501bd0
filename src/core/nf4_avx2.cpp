// The AVX2 kernels of core/nf4.cpp (nf4_kernels.h); see nf4.cpp for the numerics they reproduce.
#include "core/nf4_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

namespace medtune::nf4_detail {

namespace {

constexpr int64_t kBlock = 64;                      // nf4::kBlock
constexpr int64_t kRowBlockBytes = 4 + kBlock / 2;  // nf4::kRowBlockBytes

// 64 values of one block: codes -> table lookup with two 8-entry permutes, times the scale.
inline void block_avx2(const uint8_t* qs, float scale, float* out, const float* code16) {
  const __m256 lo_tab = _mm256_loadu_ps(code16), hi_tab = _mm256_loadu_ps(code16 + 8);
  const __m256 vs = _mm256_set1_ps(scale);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * h));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4), lo = _mm_and_si128(bytes, m4);
    // element order: hi0 lo0 hi1 lo1 ...
    const __m128i codes[2] = {_mm_unpacklo_epi8(hi, lo), _mm_unpackhi_epi8(hi, lo)};
    for (int k = 0; k < 2; ++k) {
      for (int e = 0; e < 2; ++e) {
        const __m128i c8 = e == 0 ? codes[k] : _mm_srli_si128(codes[k], 8);
        const __m256i idx = _mm256_cvtepu8_epi32(c8);
        const __m256 a = _mm256_permutevar8x32_ps(lo_tab, idx), b = _mm256_permutevar8x32_ps(hi_tab, idx);
        const __m256 v = _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
        _mm256_storeu_ps(out + 32 * h + 16 * k + 8 * e, _mm256_mul_ps(v, vs));
      }
    }
  }
}

}  // namespace

void dequantize_blocks_avx2(const uint8_t* blocks, float* out, int64_t n, const float* code16) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kRowBlockBytes, out += kBlock) {
    float am;
    std::memcpy(&am, blocks, 4);
    block_avx2(blocks + 4, am, out, code16);
  }
}

void dequantize_full_blocks_avx2(const uint8_t* packed, const float* absmax, float* out,
                                 int64_t nblocks, const float* code16) {
  for (int64_t b = 0; b < nblocks; ++b) block_avx2(packed + b * kBlock / 2, absmax[b], out + b * kBlock, code16);
}

// The decode path (rows read once, one after another): each 36-byte block asks for the line
// 8 KiB ahead, as core/quant_avx2.cpp's dot_row does and for the same reason (the hardware
// prefetcher does not run far enough ahead of rows a few hundred bytes long).
float dot_blocks_avx2(const uint8_t* blocks, const float* x, int64_t n, const float* code16) {
  constexpr int64_t kPrefetchBytes = 8192;
  alignas(32) float tmp[kBlock];
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kRowBlockBytes, x += kBlock) {
    _mm_prefetch(reinterpret_cast<const char*>(blocks + kPrefetchBytes), _MM_HINT_T0);
    dequantize_blocks_avx2(blocks, tmp, kBlock, code16);
    __m256 s = _mm256_setzero_ps();
    for (int j = 0; j < kBlock; j += 8) s = _mm256_fmadd_ps(_mm256_load_ps(tmp + j), _mm256_loadu_ps(x + j), s);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    for (float l : lanes) acc += l;
  }
  return acc;
}

}  // namespace medtune::nf4_detail

#else
// No x86 kernels on this architecture: cpu_features never selects them; the symbols must exist.
namespace medtune::nf4_detail {
void dequantize_blocks_avx2(const uint8_t*, float*, int64_t, const float*) {}
void dequantize_full_blocks_avx2(const uint8_t*, const float*, float*, int64_t, const float*) {}
float dot_blocks_avx2(const uint8_t*, const float*, int64_t, const float*) { return 0.0f; }
}  // namespace medtune::nf4_detail
#endif
