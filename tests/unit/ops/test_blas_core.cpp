// ops/cpu/blas_core.h: the correction of OpenBLAS's kernel choice (blas_core.cpp says why).
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/cpu/blas_core.h"

namespace medtune::ops {
namespace {

CpuFeatures avx2_cpu() {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  return f;
}
CpuFeatures avx512_cpu() {
  CpuFeatures f = avx2_cpu();
  f.avx512f = f.avx512bw = f.avx512vl = true;
  return f;
}

TEST(BlasCore, ReplacesACoreWithoutAvx2KernelsByWhatTheCpuRuns) {
  // The case seen on the H200 machine's Intel host: OpenBLAS 0.3.21 named it Prescott.
  EXPECT_EQ(better_blas_core("Prescott", avx512_cpu()), "SkylakeX");
  EXPECT_EQ(better_blas_core("Prescott", avx2_cpu()), "Haswell");
  EXPECT_EQ(better_blas_core("Nehalem", avx2_cpu()), "Haswell");
  EXPECT_EQ(better_blas_core("SandyBridge", avx512_cpu()), "SkylakeX");
}

TEST(BlasCore, ReplacesAnAvx2CoreOnAnAvx512Cpu) {
  // An AVX2 core on an AVX-512 CPU: 1.7x slower SGEMMs on a Zen 5 (blas_core.cpp).
  EXPECT_EQ(better_blas_core("Haswell", avx512_cpu()), "SkylakeX");
  EXPECT_EQ(better_blas_core("Zen", avx512_cpu()), "SkylakeX");
  CpuFeatures no_bw = avx512_cpu();  // SkylakeX's kernels use AVX-512 BW and VL too
  no_bw.avx512bw = false;
  EXPECT_EQ(better_blas_core("Haswell", no_bw), "");
}

TEST(BlasCore, KeepsACoreWithTheCpusWidestKernelsAndACpuWithoutAvx2) {
  for (const char* core : {"SkylakeX", "Cooperlake", "sapphirerapids", "SomeFutureCore"})
    EXPECT_EQ(better_blas_core(core, avx512_cpu()), "") << core;
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "SomeFutureCore"})
    EXPECT_EQ(better_blas_core(core, avx2_cpu()), "") << core;
  CpuFeatures old_cpu;  // SSE4.2 only: OpenBLAS's Nehalem is right for it
  old_cpu.sse42 = true;
  EXPECT_EQ(better_blas_core("Nehalem", old_cpu), "");
  CpuFeatures no_fma = avx2_cpu();
  no_fma.fma = false;
  EXPECT_EQ(better_blas_core("Prescott", no_fma), "");
}

// C = A B for a 67 x 45 x 53 product, against a double loop.
double sgemm_error() {
  const int M = 67, N = 45, K = 53;
  std::vector<float> a(M * K), b(K * N), c(M * N);
  for (int i = 0; i < M * K; ++i) a[i] = static_cast<float>((i * 7 % 13) - 6) / 8.0f;
  for (int i = 0; i < K * N; ++i) b[i] = static_cast<float>((i * 5 % 11) - 5) / 4.0f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f,
              c.data(), N);
  double worst = 0.0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0.0;
      for (int k = 0; k < K; ++k) ref += static_cast<double>(a[i * K + k]) * static_cast<double>(b[k * N + j]);
      worst = std::max(worst, std::abs(ref - static_cast<double>(c[i * N + j])));
    }
  return worst;
}

TEST(BlasCore, ReselectionSwitchesOpenBlasKernelsAndTheyStayExact) {
  const std::string start = openblas_get_corename();
  const char* env_before = std::getenv("OPENBLAS_CORETYPE");  // a machine may set it for everyone
  const std::string saved = env_before != nullptr ? env_before : "";
  if (reselect_blas_core(start).empty()) GTEST_SKIP() << "this OpenBLAS is not a DYNAMIC_ARCH build";
  // Inputs are multiples of 1/8 and 1/4 with at most 53 terms: every partial sum is exact in
  // fp32, so any core must give the exact product.
  for (const char* core : {"Prescott", "Haswell", start.c_str()}) {
    const std::string got = reselect_blas_core(core);
    EXPECT_EQ(got, std::string(core)) << "OpenBLAS did not take " << core;
    EXPECT_EQ(sgemm_error(), 0.0) << core;
  }
  EXPECT_EQ(std::string(openblas_get_corename()), start);
  const char* env_after = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(env_after != nullptr, env_before != nullptr) << "the environment was not restored";
  if (env_after != nullptr) {
    EXPECT_EQ(std::string(env_after), saved) << "the environment was not restored";
  }
}

TEST(BlasCore, SelectionAtStartRunsOnTheWidestKernelsTheCpuHas) {
  const BlasCore& core = blas_core();
  EXPECT_EQ(core.active, std::string(openblas_get_corename()));
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && cpu_features().avx2 && cpu_features().fma) {
    EXPECT_EQ(better_blas_core(core.active, cpu_features()), "") << core.active;
  }
  EXPECT_EQ(core.reason.empty(), core.active == core.detected);
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    EXPECT_TRUE(core.reason.empty()) << "the user's OPENBLAS_CORETYPE was overridden";
    EXPECT_EQ(core.environment_note.empty(), better_blas_core(core.active, cpu_features()).empty());
  } else {
    EXPECT_TRUE(core.environment_note.empty());
  }
}

}  // namespace
}  // namespace medtune::ops
