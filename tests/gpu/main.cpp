// test_gpu_ops: runs the registered GPU op cases against their CPU references (op_test.h).
//   test_gpu_ops [--quick] [--filter SUBSTRING] [--list]
// Exit codes: 0 all passed, 1 a case failed, 77 no GPU visible (CTest's SKIP_RETURN_CODE), 2 usage.
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
  gpu_test::register_all_cases(registry);

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
  if (quick)
    for (const auto& c : registry.cases())
      if (!c.quick && (filter.empty() || c.name.find(filter) != std::string::npos)) ++skipped;
  gpu::Stream stream;
  gpu_test::run_cases(registry, quick, filter, stream, [&](const gpu_test::CaseResult& r) {
    (r.ok ? passed : failed) += 1;
    std::printf("%s %s (%.0f ms)\n", r.ok ? "[ OK ]" : "[FAIL]", r.name.c_str(), r.ms);
    for (const auto& line : r.lines) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  std::printf("\ngpu op tests: %d passed, %d failed", passed, failed);
  if (skipped > 0) std::printf(", %d skipped (--quick)", skipped);
  std::printf("\n");
  return failed == 0 ? 0 : 1;
}
