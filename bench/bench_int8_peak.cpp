// The core's ceiling for the AVX2 int8 GEMM (int8_gemm_avx2_body.h), as bench_fma_peak is for
// the fp32 SGEMM: the instruction sequence each of its two forms issues per 32 products, one tile's
// 6 independent sums per thread, no memory traffic; and a third form it does not take.
//   signed  (Q8_0, NF4, the 5-bit types): x given w's sign by vpsignb, vpmaddubsw with |w|,
//           vpmaddwd by ones, vpaddd into the int32 sum; |w| (vpsignb) once per row and group.
//   nibble  (Q4_0, Q4_1, Q4_K): vpmaddubsw, vpaddw into int16 sums (widened once per block of
//           8 groups in the GEMM, not counted here).
//   int16   (the alternative for signed weights: w and x widened to int16 once, at decode and
//           packing): vpmaddwd, vpaddd per 16 products. Its ceiling is the signed form's, for twice
//           the bytes of packed tokens and broadcasts; so the signed types keep the signed form.
// The GEMM's products per second set against these say how much of the core a prompt uses, and
// what a speed-up would have to come from (BENCHMARKS.md, session 44).
//
// Usage: OMP_NUM_THREADS=T bench_int8_peak   (prints G products/s per thread; built with -mavx2)
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>

namespace {

constexpr long kIters = 200000000;

// One iteration is one group of the GEMM's 3 x 16 tile: 3 rows' 4 weight bytes (broadcast) against
// 2 vectors of 8 tokens' 4 bytes, 6 sums, 192 products (the int16 form: half of a group, 96). The
// asm statements make the operands opaque each iteration, so nothing is hoisted out of the loop (in
// the GEMM they are loads).
enum class Form { kSigned, kNibble, kInt16 };

template <Form F>
double products_per_second() {
  __m256i s[3][2];
  for (int i = 0; i < 3; ++i)
    for (int v = 0; v < 2; ++v) s[i][v] = _mm256_setzero_si256();
  __m256i w0 = _mm256_set1_epi32(0x7f05fb81), w1 = _mm256_set1_epi32(0x11f3e27f),
          w2 = _mm256_set1_epi32(0x80404020), x0 = _mm256_set1_epi32(0x01020304),
          x1 = _mm256_set1_epi32(0x7f80fe05);
  const __m256i ones = _mm256_set1_epi16(1);
  const auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < kIters; ++n) {
    __asm__ volatile("" : "+x"(w0), "+x"(w1), "+x"(w2), "+x"(x0), "+x"(x1));
    const __m256i w[3] = {w0, w1, w2}, x[2] = {x0, x1};
#pragma GCC unroll 3
    for (int i = 0; i < 3; ++i) {
      // |w|, the signed form's: once per row, as in the GEMM (the other forms take w as it is)
      const __m256i aw = F == Form::kSigned ? _mm256_sign_epi8(w[i], w[i]) : w[i];
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        if constexpr (F == Form::kSigned)
          s[i][v] = _mm256_add_epi32(
              s[i][v],
              _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[v], w[i])), ones));
        else if constexpr (F == Form::kNibble)
          s[i][v] = _mm256_add_epi16(s[i][v], _mm256_maddubs_epi16(w[i], x[v]));
        else  // a row's 2 int16 weights (broadcast) against 8 tokens' 2 int16: 16 products
          s[i][v] = _mm256_add_epi32(s[i][v], _mm256_madd_epi16(w[i], x[v]));
      }
    }
  }
  __asm__ volatile("" ::"x"(s[0][0]), "x"(s[0][1]), "x"(s[1][0]), "x"(s[1][1]), "x"(s[2][0]),
                   "x"(s[2][1]));
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(kIters) * 6 * (F == Form::kInt16 ? 16 : 32) / sec;
}

}  // namespace

int main() {
#pragma omp parallel
  {
    const double sgn = products_per_second<Form::kSigned>(),
                 nib = products_per_second<Form::kNibble>(),
                 i16 = products_per_second<Form::kInt16>();
#pragma omp critical
    std::printf("thread %d: G products/s: signed form %.1f, nibble form %.1f, int16 form %.1f\n",
                omp_get_thread_num(), sgn / 1e9, nib / 1e9, i16 / 1e9);
  }
  return 0;
}
