// The gradient exchange alone (dist/gradient_sum.h), without training: how long one optimizer
// step's exchange of B floats takes when every rank arrives at once (a barrier before each), for
// the ordered (deterministic) sum and the single all-reduce. It bounds what overlapping the
// exchange with the backward pass could save: at most this time per step. Run under mpirun:
//   mpirun -np 2 build/bench/bench_exchange [FLOATS ...] [--reps N] [--micro M]
// FLOATS: gradient sizes (default: SmolLM2-135M r16 all-linear 2,442,240; Llama-2-7B r16 q,k,v,o
// 16,777,216). --micro: micro-batches per rank and step (1). Prints one JSON line per size and
// mode, from rank 0: median, min and max milliseconds per exchange, and GB/s of the buffer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dist/gradient_sum.h"
#include "dist/launch.h"

using namespace medtune;

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  int reps = 20, micro = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--micro") == 0 && i + 1 < argc) {
      micro = std::atoi(argv[++i]);
    } else {
      sizes.push_back(std::strtoull(argv[i], nullptr, 10));
    }
  }
  if (sizes.empty()) sizes = {2442240, 16777216};
  dist::Communicator& comm = dist::world();
  for (const size_t n : sizes) {
    std::vector<float> grads(n);  // (n) one buffer standing for all LoRA gradients
    for (const bool ordered : {true, false}) {
      dist::StepGradientSum sum(comm, {std::span<float>(grads)}, ordered);
      std::vector<double> ms;
      for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up (allocations, connections)
        sum.begin_step();
        for (int m = 0; m < micro; ++m) {
          for (size_t i = 0; i < n; ++i) grads[i] = static_cast<float>((i * 7 + static_cast<size_t>(m + comm.rank())) % 13) - 6.0f;
          sum.add_micro_batch(1.0);
        }
        comm.barrier("the benchmark's start line");
        const auto t0 = std::chrono::steady_clock::now();
        sum.finish(r);
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      if (comm.rank() == 0)
        std::printf("{\"ranks\": %d, \"backend\": \"%s\", \"floats\": %zu, \"mb\": %.1f, \"mode\": \"%s\", \"micro\": %d, "
                    "\"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f, \"gb_per_s\": %.2f}\n",
                    comm.size(), comm.backend_name().c_str(), n, static_cast<double>(n) * 4e-6,
                    ordered ? "ordered" : "allreduce", micro, med, ms.front(), ms.back(),
                    static_cast<double>(n) * 4e-6 / med);
    }
  }
  dist::finalize();
  return 0;
}
