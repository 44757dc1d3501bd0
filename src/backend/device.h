// Which device a command computes on: `--device cpu|gpu|gpu:N`, config key `device`.
#pragma once

#include <string>

namespace medtune::backend {

enum class DeviceKind { kCpu, kGpu };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // GPU ordinal (0 for the CPU)

  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "gpu:0"
};

// "cpu", "gpu" (= gpu:0) or "gpu:N"; BadInput naming `what` (e.g. "--device") and the accepted
// forms otherwise.
Device parse_device(const std::string& s, const std::string& what);

}  // namespace medtune::backend
