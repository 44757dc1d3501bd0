// test_gpu_ops: runs the registered GPU op cases against their CPU references (op_test.h).
//   test_gpu_ops [--quick] [--filter SUBSTRING] [--exclude SUBSTRING]... [--list] [--collectives]
// --exclude leaves out the cases whose names contain SUBSTRING (the HIP-CPU build's run leaves out
// the two whose checks need a real device's allocator: tests/gpu/hip_cpu/README.md).
// --collectives runs the NCCL/RCCL cases alone (a world of one rank), which the default set leaves
// out because they need the library at run time; 77 when the build has no NCCL/RCCL.
// Exit codes: 0 all passed, 1 a case failed, 77 no GPU visible (CTest's SKIP_RETURN_CODE; the
// host-only cases, which ran, passed), 2 usage.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "gpu/runtime.h"
#include "op_test.h"

using namespace medtune;

int main(int argc, char** argv) {
  bool quick = false, list = false, collectives = false;
  std::string filter;
  std::vector<std::string> excluded;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--collectives") == 0) {
      collectives = true;
    } else if (std::strcmp(argv[i], "--list") == 0) {
      list = true;
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else if (std::strcmp(argv[i], "--exclude") == 0 && i + 1 < argc) {
      excluded.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--filter SUBSTRING] [--exclude SUBSTRING]... [--list] "
                   "[--collectives]\n",
                   argv[0]);
      return 2;
    }
  }

  gpu_test::Registry all;
  if (collectives) {
    if (!gpu_test::collectives_compiled()) {
      std::printf("SKIP: this build has no NCCL/RCCL (its header was not found at configure time)\n");
      return 77;
    }
    gpu_test::register_collective_cases(all);
  } else {
    gpu_test::register_all_cases(all);
  }
  const auto is_excluded = [&](const std::string& name) {
    for (const auto& e : excluded)
      if (name.find(e) != std::string::npos) return true;
    return false;
  };
  gpu_test::Registry registry;
  for (const auto& c : all.host_cases())
    if (!is_excluded(c.name)) registry.add_host(c.name, c.run);
  for (const auto& c : all.cases())
    if (!is_excluded(c.name)) registry.add(c.name, c.quick, c.run);
  const size_t n_excluded = all.cases().size() + all.host_cases().size() -
                            registry.cases().size() - registry.host_cases().size();

  if (list) {
    for (const auto& c : registry.host_cases()) std::printf("%s (host only)\n", c.name.c_str());
    for (const auto& c : registry.cases()) std::printf("%s%s\n", c.name.c_str(), c.quick ? "" : " (full only)");
    return 0;
  }

  int passed = 0, failed = 0, skipped = 0;
  const auto report = [&](const gpu_test::CaseResult& r) {
    (r.ok ? passed : failed) += 1;
    std::printf("%s %s (%.0f ms)\n", r.ok ? "[ OK ]" : "[FAIL]", r.name.c_str(), r.ms);
    for (const auto& line : r.lines) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  // Host cases first: they run without a device, so a machine without one still checks them.
  gpu_test::run_host_cases(registry, report);
  if (gpu::device_count() == 0) {
    std::printf("SKIP: no GPU visible to the %s runtime (%s); the GPU op tests need one\n",
                gpu::backend_name(), gpu::no_device_reason().c_str());
    if (!registry.host_cases().empty()) std::printf("host-only cases: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 77 : 1;
  }
  try {
    const gpu::DeviceInfo info = gpu::device_info(0);
    std::printf("backend %s, device 0: %s\n", gpu::backend_name(), gpu::describe(info).c_str());
  } catch (const std::exception& e) {
    std::printf("FAIL: device query: %s\n", e.what());
    return 1;
  }

  if (quick)
    for (const auto& c : registry.cases())
      if (!c.quick && (filter.empty() || c.name.find(filter) != std::string::npos)) ++skipped;
  gpu::Stream stream;
  gpu_test::run_cases(registry, quick, filter, stream, report);
  std::printf("\ngpu op tests: %d passed, %d failed", passed, failed);
  if (skipped > 0) std::printf(", %d skipped (--quick)", skipped);
  if (n_excluded > 0) std::printf(", %zu excluded (--exclude)", n_excluded);
  std::printf("\n");
  return failed == 0 ? 0 : 1;
}
