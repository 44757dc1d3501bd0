// The memory read bandwidth a decode step can use: each thread streams its half (or share) of a
// buffer larger than the last-level cache with 256-bit loads summed by vpsadbw (one cheap
// operation per 32 bytes, so the loads, not the arithmetic, set the rate). A decode step reads
// every weight once per token (BENCHMARKS.md: 96.4 MB for SmolLM2-135M Q4_1), so bytes per token
// times tokens/s set against this says how much of the memory a decode uses.
//
// Usage: OMP_NUM_THREADS=T bench_read_bandwidth [MiB=256] [repeats=10]   (built with -mavx2)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t bytes = mib << 20, n = bytes / 32;
  auto* buf = static_cast<__m256i*>(std::aligned_alloc(64, bytes));
  if (buf == nullptr) return 1;
#pragma omp parallel for schedule(static)  // first touch by the thread that will read it
  for (size_t i = 0; i < n; ++i) buf[i] = _mm256_set1_epi8(static_cast<char>(i));
  std::vector<double> gbps;
  uint64_t check = 0;
  for (int r = 0; r <= repeats; ++r) {  // repeat 0 warms up: not counted
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : check)
    {
      // 4 independent sums, so that several loads are in flight.
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
      const __m256i zero = _mm256_setzero_si256();
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_sad_epu8(_mm256_load_si256(buf + i), zero));
        s1 = _mm256_add_epi64(s1, _mm256_sad_epu8(_mm256_load_si256(buf + i + 1), zero));
        s2 = _mm256_add_epi64(s2, _mm256_sad_epu8(_mm256_load_si256(buf + i + 2), zero));
        s3 = _mm256_add_epi64(s3, _mm256_sad_epu8(_mm256_load_si256(buf + i + 3), zero));
      }
      alignas(32) uint64_t lanes[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                         _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
      check += lanes[0] + lanes[1] + lanes[2] + lanes[3];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  std::printf("%d threads, %zu MiB: read %.1f GB/s median (min %.1f, max %.1f) [check %llu]\n",
              omp_get_max_threads(), mib, gbps[gbps.size() / 2], gbps.front(), gbps.back(),
              static_cast<unsigned long long>(check));
  std::free(buf);
  return 0;
}
