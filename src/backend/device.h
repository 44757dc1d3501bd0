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

// The arithmetic of the large matrix products (`--precision`, config key `precision`):
//   fp32  fp32 inputs and accumulation: what matches transformers in fp32 (the CPU's default);
//   bf16  inputs rounded to bf16, products and sums in fp32 (tensor cores on a GPU; oneDNN on a
//         CPU with AVX512-BF16 or AMX, widened SGEMM on other CPUs); adapters, gradients and
//         optimizer state stay fp32.
//   int8  CPU inference on quantized bases: activations quantized per block of 32 to int8 and
//         integer dot products against Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/NF4 weights
//         (core/quant_int8.h); weights of other dtypes, and every other op, stay fp32. Not for
//         training (no backward).
enum class Precision { kFp32, kBf16, kInt8 };
const char* precision_name(Precision p);  // "fp32", "bf16", "int8"
// "fp32", "bf16", "int8", or "auto": bf16 on a GPU, fp32 on the CPU. BadInput naming `what`
// otherwise.
Precision parse_precision(const std::string& s, const Device& d, const std::string& what);
// The same for the commands that only infer (generate, serve), whose `auto` is the fastest path
// with measured accuracy: on the CPU, int8 when the base's block linears all take the int8 route
// (`int8_base`) and this CPU has vector int8 kernels (AVX2 or more; the scalar ones are slower
// than fp32), else fp32; bf16 on a GPU. Its accuracy against fp32, measured: docs/decisions/
// cpu-dispatch.md, "--precision auto for generate and serve".
Precision parse_inference_precision(const std::string& s, const Device& d, bool int8_base, const std::string& what);

}  // namespace medtune::backend
