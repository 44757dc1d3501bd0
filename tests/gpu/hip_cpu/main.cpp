// GPU op cases run by HIP-CPU on the CPU (scripts/hip-cpu-check.sh), with their derived bounds:
// tests/gpu/cases_attention.cpp (the tiled kernel, the GEMM attention, the split-key decode
// kernel) and tests/gpu/cases_gemv.cpp (the decode steps' bf16 product).
//   hip_cpu_cases [FILTER]
#include <cstdio>
#include <string>

#include "gpu/runtime.h"
#include "op_test.h"

using namespace medtune;

// run.cpp's register_all_cases names every op file; only the cases above are built here.
namespace medtune::gpu_test {
void register_runtime_cases(Registry&) {}
void register_embedding_cases(Registry&) {}
void register_rmsnorm_cases(Registry&) {}
void register_rope_cases(Registry&) {}
void register_swiglu_cases(Registry&) {}
void register_cross_entropy_cases(Registry&) {}
void register_adamw_cases(Registry&) {}
void register_dequantize_cases(Registry&) {}
void register_convert_cases(Registry&) {}
void register_gemm_cases(Registry&) {}
void register_elementwise_cases(Registry&) {}
}  // namespace medtune::gpu_test

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  gpu_test::Registry registry;
  gpu_test::register_attention_cases(registry);
  gpu_test::register_gemv_cases(registry);
  int passed = 0, failed = 0;
  const auto report = [&](const gpu_test::CaseResult& r) {
    (r.ok ? passed : failed) += 1;
    std::printf("%s %s (%.0f ms)\n", r.ok ? "[ OK ]" : "[FAIL]", r.name.c_str(), r.ms);
    if (!r.ok)
      for (const auto& line : r.lines) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  gpu::Stream stream;
  gpu_test::run_cases(registry, false, filter, stream, report);
  std::printf("\nHIP-CPU cases: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
