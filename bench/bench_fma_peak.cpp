// The core's fp32 FMA peak: 12 independent chains of 8-wide AVX2 FMAs per thread, no memory
// traffic. It is the ceiling any fp32 GEMM on this machine can approach; BENCHMARKS.md and
// docs/decisions/blas.md set the measured SGEMM rates against it.
//
// Usage: OMP_NUM_THREADS=T bench_fma_peak   (prints GFLOP/s per thread; built with -mavx2 -mfma)
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>

#define MEDTUNE_FMA_STEP(x) x = _mm256_fmadd_ps(x, m, c);

int main() {
#pragma omp parallel
  {
    // Distinct starting values: identical chains would be merged into one by the compiler.
    const auto start = [](int i) { return _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(i)); };
    __m256 a0 = start(0), a1 = start(1), a2 = start(2), a3 = start(3), a4 = start(4), a5 = start(5);
    __m256 a6 = start(6), a7 = start(7), a8 = start(8), a9 = start(9), a10 = start(10), a11 = start(11);
    const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
    constexpr long kIters = 200000000;
    const auto t0 = std::chrono::steady_clock::now();
    for (long n = 0; n < kIters; ++n) {
      MEDTUNE_FMA_STEP(a0) MEDTUNE_FMA_STEP(a1) MEDTUNE_FMA_STEP(a2) MEDTUNE_FMA_STEP(a3)
      MEDTUNE_FMA_STEP(a4) MEDTUNE_FMA_STEP(a5) MEDTUNE_FMA_STEP(a6) MEDTUNE_FMA_STEP(a7)
      MEDTUNE_FMA_STEP(a8) MEDTUNE_FMA_STEP(a9) MEDTUNE_FMA_STEP(a10) MEDTUNE_FMA_STEP(a11)
      // Keeps the 12 chains live in registers (no spills, nothing hoisted out of the loop).
      __asm__ volatile("" ::"x"(a0), "x"(a1), "x"(a2), "x"(a3), "x"(a4), "x"(a5), "x"(a6), "x"(a7),
                       "x"(a8), "x"(a9), "x"(a10), "x"(a11));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#pragma omp critical
    std::printf("thread %d: %.1f GFLOP/s fp32 FMA peak\n", omp_get_thread_num(),
                static_cast<double>(kIters) * 12 * 16 / s / 1e9);
  }
  return 0;
}
