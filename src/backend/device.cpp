#include "backend/device.h"

#include <charconv>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/quant_int8.h"

namespace medtune::backend {

std::string Device::str() const {
  return is_cpu() ? "cpu" : "gpu:" + std::to_string(index);
}

Device parse_device(const std::string& s, const std::string& what) {
  if (s == "cpu") return {};
  if (s == "gpu") return {DeviceKind::kGpu, 0};
  if (s.rfind("gpu:", 0) == 0 && s.size() > 4) {
    int index = -1;
    const char* first = s.data() + 4;
    const char* last = s.data() + s.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && index >= 0) return {DeviceKind::kGpu, index};
  }
  throw BadInput(what + ": '" + s + "' is not a device; use cpu, gpu or gpu:N (N = 0, 1, ...)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kInt8: return "int8";
    case Precision::kFp32: break;
  }
  return "fp32";
}

Precision parse_precision(const std::string& s, const Device& d, const std::string& what) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "int8") return Precision::kInt8;
  if (s == "auto") return d.is_cpu() ? Precision::kFp32 : Precision::kBf16;
  throw BadInput(what + ": '" + s + "' is not a precision; use fp32, bf16, int8 or auto (bf16 on a GPU, fp32 on the CPU)");
}

Precision parse_inference_precision(const std::string& s, const Device& d, bool int8_base, const std::string& what) {
  if (s == "auto" && d.is_cpu() && int8_base && int8::kernel_isa() != Isa::kScalar) return Precision::kInt8;
  if (s == "auto") return d.is_cpu() ? Precision::kFp32 : Precision::kBf16;
  try {
    return parse_precision(s, d, what);
  } catch (const BadInput&) {
    throw BadInput(what + ": '" + s + "' is not a precision; use fp32, bf16, int8 or auto (bf16 on a GPU; on the CPU "
                   "int8 for a quantized base where the CPU has int8 kernels, else fp32)");
  }
}

}  // namespace medtune::backend
