// fp32 linear_forward against another path (the int8 route, or the server's batch-invariant
// kernel with --against invariant) on SmolLM2-135M's projection shapes, side by side in one
// process: each repeat times both paths back to back (alternating which goes first), so a noisy
// shared machine slows both alike; prints medians and the fp32 / other time ratio, then one JSON
// line.
//
//   bench_int8_linear [--dtype Q4_1|Q8_0|Q4_0] [--repeats 9] [--threads N] [--tokens 1,256]
//                     [--against int8|int8rows|invariant] [--shapes 576x576,196608x576]
// int8: the int8 route as the model runs it (the GEMM from ops::int8_gemm_min_tokens tokens:
// AVX-512 VNNI or AVX2); int8rows: its row kernels at every N (what fewer tokens take; the same
// bits as the GEMM). --shapes: rows x cols of the products (default SmolLM2-135M's five); one of
// 196608 x 576 (70 MB of Q4_1) is read from memory, not the cache, at every call.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_timing.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "ops/linear.h"

using medtune::DType;
using medtune::bench::median;
using medtune::bench::seconds_since;

int main(int argc, char** argv) {
  std::string dtype_s = "Q4_1", tokens_s = "1,256", against = "int8", shapes_s;
  int repeats = 9, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dtype") dtype_s = v;
    else if (k == "--repeats") repeats = std::atoi(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--tokens") tokens_s = v;
    else if (k == "--against" && (v == "int8" || v == "int8rows" || v == "invariant")) against = v;
    else if (k == "--shapes") shapes_s = v;
    else {
      std::cerr << "usage: bench_int8_linear [--dtype Q4_1|Q8_0|Q4_0] [--repeats R] [--threads N] "
                   "[--tokens 1,256] [--against int8|int8rows|invariant] [--shapes RxC,...]\n";
      return 2;
    }
  }
  const DType t = dtype_s == "Q8_0" ? DType::Q8_0 : dtype_s == "Q4_0" ? DType::Q4_0 : DType::Q4_1;
  if (threads > 0) omp_set_num_threads(threads);
  std::vector<int64_t> token_counts;
  std::stringstream ss(tokens_s);
  for (std::string s; std::getline(ss, s, ',');) token_counts.push_back(std::atol(s.c_str()));

  // (rows, cols) = (out, in): q/o, k/v, gate/up, down, and the tied lm_head.
  std::vector<std::pair<int64_t, int64_t>> shapes = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  if (!shapes_s.empty()) {
    shapes.clear();
    std::stringstream sh(shapes_s);
    for (std::string one; std::getline(sh, one, ',');) {
      const size_t x = one.find('x');
      const int64_t rows = x == std::string::npos ? 0 : std::atol(one.substr(0, x).c_str());
      const int64_t cols = x == std::string::npos ? 0 : std::atol(one.substr(x + 1).c_str());
      if (rows <= 0 || cols <= 0 || cols % 32 != 0) {
        std::cerr << "bench_int8_linear: --shapes wants ROWSxCOLS with COLS a multiple of 32, got '" << one << "'\n";
        return 2;
      }
      shapes.emplace_back(rows, cols);
    }
  }
  std::mt19937_64 rng(1);
  nlohmann::json out = nlohmann::json::array();
  std::cout << "dtype " << dtype_s << ", " << omp_get_max_threads() << " threads, int8 path "
            << medtune::isa_name(medtune::active_isa()) << "\n"
            << "rows x cols     N   fp32 ms   " << against << " ms   " << against << " speed-up\n";
  for (const auto& [rows, cols] : shapes) {
    std::vector<uint8_t> w(static_cast<size_t>(medtune::dtype_row_bytes(t, cols) * rows));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    const int64_t bb = medtune::dtype_block_bytes(t);
    for (size_t b = 0; b < w.size() / static_cast<size_t>(bb); ++b)  // finite f16 scale (and min)
      for (int k = 0; k < (t == DType::Q4_1 ? 2 : 1); ++k) {
        const uint16_t h = static_cast<uint16_t>(0x1000 + rng() % 0x2000);
        std::memcpy(w.data() + b * static_cast<size_t>(bb) + 2 * k, &h, 2);
      }
    const medtune::ops::StoredMatrix m{t, rows, cols, w.data()};
    for (int64_t N : token_counts) {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(N * cols)), y(static_cast<size_t>(N * rows));  // (N, cols), (N, rows)
      for (float& v : x) v = nd(rng);
      std::vector<double> t_fp32, t_int8;
      for (int r = 0; r <= repeats; ++r) {  // round 0 warms up: not counted
        for (int k = 0; k < 2; ++k) {
          const bool int8 = (k == 0) == (r % 2 == 0);
          const auto t0 = std::chrono::steady_clock::now();
          if (int8 && against == "invariant") medtune::ops::linear_forward_batch_invariant(y.data(), x.data(), m, nullptr, N);
          else if (int8) medtune::ops::linear_forward_int8(y.data(), x.data(), m, nullptr, N, against == "int8rows");
          else medtune::ops::linear_forward(y.data(), x.data(), m, nullptr, N);
          const double s = seconds_since(t0);
          if (r > 0) (int8 ? t_int8 : t_fp32).push_back(s);
        }
      }
      const double f = median(t_fp32), q = median(t_int8);
      std::printf("%5lld x %-5lld %5lld %9.3f %9.3f %8.2fx\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), static_cast<long long>(N), f * 1e3, q * 1e3, f / q);
      out.push_back({{"rows", rows}, {"cols", cols}, {"tokens", N}, {"fp32_ms", f * 1e3}, {"other_ms", q * 1e3}, {"speedup", f / q}});
    }
  }
  std::cout << nlohmann::json({{"dtype", dtype_s}, {"threads", omp_get_max_threads()},
                               {"int8_path", medtune::isa_name(medtune::active_isa())}, {"against", against}, {"results", out}}).dump()
            << "\n";
  return 0;
}
