// OpenBLAS cblas_sgemm vs oneDNN dnnl_sgemm on the fp32 GEMM shapes medtune runs.
// Measurements and the decision they back: docs/decisions/blas.md.
//
// Every product is C (M x N) = X (M x K) . W^T with W (N x K), all row-major, as in
// ops::linear_forward: cblas_sgemm(RowMajor, NoTrans, Trans, ...) vs dnnl_sgemm('N', 'T', ...)
// (dnnl_sgemm is row-major, no layout argument). Both engines run in one process and alternate
// order every repeat, so load from other processes on a shared machine hits both alike; the
// median of the repeats is reported.
//
// Build by hand (Debian paths; one command line):
//   g++ -O2 -march=native -fopenmp -std=c++20 bench/bench_gemm.cpp -o bench_gemm
//       -I/usr/include/x86_64-linux-gnu/openblas-openmp
//       /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so
//       -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -ldnnl
// The -rpath matters: the library's SONAME is libopenblas.so.0, which the loader otherwise
// resolves through update-alternatives, i.e. to the *pthread* variant (priority 100 vs 95).
// The header line "OpenBLAS parallel mode" must say 2 (OpenMP).
// Or through CMake (target bench_gemm, built only when libdnnl is found; CMake sets RUNPATH). The
// CMake build links medtune_ops, whose startup code corrects OpenBLAS's core where it misjudged the
// CPU (ops/cpu/blas_core.cpp), as in every medtune program; the hand build keeps OpenBLAS's choice.
//
// Usage: bench_gemm [--repeats N] [--threads 1,2] [--no-7b] [--7b-1thread-only]
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

struct Shape {
  const char* name;
  int M, N, K;
  bool big;  // 7B shapes: optionally 1 thread only
};

const Shape kShapes[] = {
    {"135M q/o/down-in proj", 512, 576, 576, false},
    {"135M k/v proj (GQA)", 512, 192, 576, false},
    {"135M gate/up proj", 512, 1536, 576, false},
    {"135M down proj", 512, 576, 1536, false},
    {"7B q/k/v/o proj", 512, 4096, 4096, true},
    {"7B gate/up proj", 512, 11008, 4096, true},
    {"135M decode gemv", 1, 576, 576, false},
    {"7B decode gemv", 1, 4096, 4096, true},
    {"quant panel 64 rows", 512, 64, 576, false},
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void run_openblas(const Shape& s, const float* x, const float* w, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.M, s.N, s.K, 1.0f, x, s.K, w, s.K, 0.0f,
              c, s.N);
}

void run_dnnl(const Shape& s, const float* x, const float* w, float* c) {
  // Row-major: A = x (M x K, lda K), B^T where B stored as w (N x K, ldb K), C (M x N, ldc N).
  const dnnl_status_t st =
      dnnl_sgemm('N', 'T', s.M, s.N, s.K, 1.0f, x, s.K, w, s.K, 0.0f, c, s.N);
  if (st != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed: %d\n", static_cast<int>(st));
    std::exit(1);
  }
}

int threads_in_process() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

struct Engines {
  std::function<void()> a, b;  // a = OpenBLAS, b = oneDNN
};

// Times both engines `repeats` times after one warm-up call each, alternating which one goes
// first. Each sample repeats the call `inner` times (enough work to time gemv shapes).
void time_pair(const Engines& e, int repeats, int inner, std::vector<double>& ta,
               std::vector<double>& tb) {
  e.a();
  e.b();
  e.a();
  e.b();
  for (int r = 0; r < repeats; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool first_a = (r % 2 == 0);
      const bool do_a = (k == 0) == first_a;
      const auto t0 = Clock::now();
      for (int i = 0; i < inner; ++i) (do_a ? e.a : e.b)();
      (do_a ? ta : tb).push_back(seconds_since(t0) / inner);
    }
  }
}

double max_rel_diff(const std::vector<float>& p, const std::vector<float>& q) {
  double num = 0, den = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(p[i] - q[i])));
    den = std::max(den, static_cast<double>(std::fabs(p[i])));
  }
  return den > 0 ? num / den : num;
}

void fill(std::vector<float>& v, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : v) x = d(rng);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 9;
  std::vector<int> thread_counts = {1, 2};
  bool no_7b = false, big_1thread_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      thread_counts.clear();
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        thread_counts.push_back(std::atoi(list.substr(pos, comma - pos).c_str()));
        pos = comma + 1;
      }
    } else if (!std::strcmp(argv[i], "--no-7b")) {
      no_7b = true;
    } else if (!std::strcmp(argv[i], "--7b-1thread-only")) {
      big_1thread_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--threads 1,2] [--no-7b] [--7b-1thread-only]\n",
                   argv[0]);
      return 2;
    }
  }

  const dnnl_version_t* dv = dnnl_version();
  std::printf("# OpenBLAS: %s\n# OpenBLAS parallel mode: %d (0 seq, 1 pthreads, 2 OpenMP)\n",
              openblas_get_config(), openblas_get_parallel());
  std::printf("# oneDNN: %d.%d.%d cpu_runtime=%u (%s)\n",
              dv->major, dv->minor, dv->patch, dv->cpu_runtime,
              dv->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
  std::printf("# omp_get_num_procs=%d repeats=%d (median reported, engines alternate per repeat)\n",
              omp_get_num_procs(), repeats);
  std::printf("%-22s %18s %3s %10s %10s %7s %9s\n", "shape", "MxNxK", "thr", "openblas",
              "onednn", "dnnl/ob", "relerr");
  std::printf("%-22s %18s %3s %10s %10s %7s %9s\n", "", "", "", "GFLOP/s", "GFLOP/s", "", "");

  std::mt19937 rng(42);
  for (int nt : thread_counts) {
    omp_set_num_threads(nt);
    openblas_set_num_threads(nt);
    for (const Shape& s : kShapes) {
      if (s.big && (no_7b || (big_1thread_only && nt > 1))) continue;
      std::vector<float> x(static_cast<size_t>(s.M) * s.K), w(static_cast<size_t>(s.N) * s.K);
      std::vector<float> ca(static_cast<size_t>(s.M) * s.N), cb(ca.size());
      fill(x, rng);
      fill(w, rng);
      const double flop = 2.0 * s.M * s.N * s.K;
      // ~50 MFLOP per sample at least, so gemv samples are not dominated by timer noise.
      const int inner = std::max(1, static_cast<int>(5e7 / flop));
      Engines e{[&] { run_openblas(s, x.data(), w.data(), ca.data()); },
                [&] { run_dnnl(s, x.data(), w.data(), cb.data()); }};
      std::vector<double> ta, tb;
      time_pair(e, repeats, inner, ta, tb);
      const double ga = flop / median(ta) * 1e-9, gb = flop / median(tb) * 1e-9;
      char dims[32];
      std::snprintf(dims, sizeof dims, "%dx%dx%d", s.M, s.N, s.K);
      std::printf("%-22s %18s %3d %10.1f %10.1f %7.2f %9.1e\n", s.name, dims, nt, ga, gb, gb / ga,
                  max_rel_diff(ca, cb));
      if (s.M == 1) {
        // OpenBLAS 0.3.21 runs an M=1 sgemm through the full packed GEMM; the same product as
        // cblas_sgemv (y = W . x, W row-major N x K) is what a decode path should call.
        Engines g{[&] {
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, s.N, s.K, 1.0f, w.data(), s.K,
                                x.data(), 1, 0.0f, ca.data(), 1);
                  },
                  [&] { run_dnnl(s, x.data(), w.data(), cb.data()); }};
        std::vector<double> ga_t, gb_t;
        time_pair(g, repeats, inner, ga_t, gb_t);
        const double gva = flop / median(ga_t) * 1e-9, gvb = flop / median(gb_t) * 1e-9;
        std::printf("%-22s %18s %3d %10.1f %10.1f %7.2f %9.1e\n", "  same, cblas_sgemv", dims, nt,
                    gva, gvb, gvb / gva, max_rel_diff(ca, cb));
      }
      std::fflush(stdout);
    }
  }

  // medtune's quantized linear_forward: an outer `#pragma omp parallel for` over 64-row panels,
  // each calling sgemm (512 x 64 x K). Inside a parallel region each BLAS call should run on one
  // thread; the process thread count after the run shows whether either engine nested.
  std::printf("\n# nested: omp parallel for over 64-row panels, each an sgemm 512x64xK "
              "(as ops::linear_forward, quantized path); OMP_MAX_ACTIVE_LEVELS=%d\n",
              omp_get_max_active_levels());
  std::printf("%-22s %18s %3s %10s %10s %7s %9s %s\n", "panels of", "MxRxK", "thr", "openblas",
              "onednn", "dnnl/ob", "relerr", "threads(ob,dnnl)");
  const int nested_shapes[][3] = {{512, 576, 576}, {512, 1536, 576}, {512, 4096, 4096}};
  for (int nt : thread_counts) {
    omp_set_num_threads(nt);
    openblas_set_num_threads(nt);
    for (const auto& ns : nested_shapes) {
      const int M = ns[0], R = ns[1], K = ns[2];
      if (K == 4096 && no_7b) continue;
      constexpr int kPanel = 64;
      const int panels = (R + kPanel - 1) / kPanel;
      std::vector<float> x(static_cast<size_t>(M) * K), w(static_cast<size_t>(R) * K);
      std::vector<float> ca(static_cast<size_t>(M) * R), cb(ca.size());
      fill(x, rng);
      fill(w, rng);
      int thr_a = 0, thr_b = 0;
      auto nested = [&](bool use_dnnl, float* c, int* thr) {
#pragma omp parallel for schedule(static)
        for (int p = 0; p < panels; ++p) {
          const int r0 = p * kPanel, rows = std::min(R, r0 + kPanel) - r0;
          const float* wp = w.data() + static_cast<size_t>(r0) * K;  // stands in for the panel
          if (use_dnnl) {
            dnnl_sgemm('N', 'T', M, rows, K, 1.0f, x.data(), K, wp, K, 0.0f, c + r0, R);
          } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, rows, K, 1.0f, x.data(), K, wp,
                        K, 0.0f, c + r0, R);
          }
        }
        *thr = std::max(*thr, threads_in_process());
      };
      Engines e{[&] { nested(false, ca.data(), &thr_a); },
                [&] { nested(true, cb.data(), &thr_b); }};
      std::vector<double> ta, tb;
      time_pair(e, repeats, 1, ta, tb);
      const double flop = 2.0 * M * R * K;
      const double ga = flop / median(ta) * 1e-9, gb = flop / median(tb) * 1e-9;
      char dims[32];
      std::snprintf(dims, sizeof dims, "%dx%dx%d", M, R, K);
      std::printf("%-22s %18s %3d %10.1f %10.1f %7.2f %9.1e %d,%d\n", "64-row panels", dims, nt,
                  ga, gb, gb / ga, max_rel_diff(ca, cb), thr_a, thr_b);
      std::fflush(stdout);
    }
  }
  return 0;
}
