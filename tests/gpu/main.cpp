// test_gpu_ops: runs the registered GPU op cases against their CPU references (op_test.h).
//   test_gpu_ops [--quick] [--filter SUBSTRING] [--list]
// Exit codes: 0 all passed, 1 a case failed, 77 no GPU visible (CTest's SKIP_RETURN_CODE), 2 usage.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "gpu/runtime.h"
#include "op_test.h"

using namespace medtune;

int main(int argc, char** argv) {
  bool quick = false, list = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--list") == 0) {
      list = true;
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--filter SUBSTRING] [--list]\n", argv[0]);
      return 2;
    }
  }

  gpu_test::Registry registry;
  gpu_test::register_runtime_cases(registry);
  gpu_test::register_embedding_cases(registry);
  gpu_test::register_rmsnorm_cases(registry);
  gpu_test::register_rope_cases(registry);
  gpu_test::register_swiglu_cases(registry);
  gpu_test::register_cross_entropy_cases(registry);
  gpu_test::register_adamw_cases(registry);
  gpu_test::register_dequantize_cases(registry);
  gpu_test::register_convert_cases(registry);

  if (list) {
    for (const auto& c : registry.cases()) std::printf("%s%s\n", c.name.c_str(), c.quick ? "" : " (full only)");
    return 0;
  }

  if (gpu::device_count() == 0) {
    std::printf("SKIP: no GPU visible to the %s runtime (%s); the GPU op tests need one\n",
                gpu::backend_name(), gpu::no_device_reason().c_str());
    return 77;
  }
  try {
    const gpu::DeviceInfo info = gpu::device_info(0);
    std::printf("backend %s, device 0: %s\n", gpu::backend_name(), gpu::describe(info).c_str());
  } catch (const std::exception& e) {
    std::printf("FAIL: device query: %s\n", e.what());
    return 1;
  }

  int passed = 0, failed = 0, skipped = 0;
  gpu::Stream stream;
  for (const auto& c : registry.cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    if (quick && !c.quick) {
      ++skipped;
      continue;
    }
    gpu_test::Checks checks;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.run(checks, stream);
    } catch (const std::exception& e) {
      checks.record(false, std::string("exception: ") + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool ok = checks.passed() && !checks.lines().empty();
    (ok ? passed : failed) += 1;
    std::printf("%s %s (%.0f ms)\n", ok ? "[ OK ]" : "[FAIL]", c.name.c_str(), ms);
    for (const auto& line : checks.lines()) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  std::printf("\ngpu op tests: %d passed, %d failed", passed, failed);
  if (skipped > 0) std::printf(", %d skipped (--quick)", skipped);
  std::printf("\n");
  return failed == 0 ? 0 : 1;
}
