// What this CPU can execute, read once at run time (cpuid and XCR0, core/x86_cpuid.h), and
// which kernel path (ISA) each dispatched op takes. Never what the build machine had: the build
// targets a portable baseline (CMake MEDTUNE_X86_BASELINE, x86-64-v3 by default) and the faster
// kernels live in per-ISA files (src/**/*_<isa>.cpp, cmake/isa_kernels.cmake) called only when
// the CPU has that ISA. docs/decisions/cpu-dispatch.md says why and what was tested where.
#pragma once

#include <string>
#include <vector>

namespace medtune {

struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool avxvnni = false, amx_tile = false, amx_int8 = false, amx_bf16 = false;
  // Which CPU, for tuning choices that follow the microarchitecture rather than an instruction
  // (the decode kernels' prefetch distance, core/quant_int8.h): the vendor, and the family and
  // model as /proc/cpuinfo and the vendors' manuals give them (base plus extended family; model
  // with the extended model bits), e.g. AMD family 25 (19h) for Zen 3 and Zen 4.
  bool amd = false, intel = false;
  int family = 0, model = 0;
};

// This CPU's features (detected once; thread-safe).
const CpuFeatures& cpu_features();
// Their names, in a fixed order, for doctor and reports: "avx2 fma f16c ...".
std::vector<std::string> cpu_feature_names(const CpuFeatures& f);

// Kernel paths, slowest first. Each dispatched op picks the best one this CPU has, capped by the
// environment variable MEDTUNE_ISA (scalar|avx2|avxvnni|avx512vnni), which benchmarks and tests
// use to run a slower path on a faster CPU; asking for a path this CPU lacks is a BadInput.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3 };
const char* isa_name(Isa isa);
// The best path this CPU supports (ignores MEDTUNE_ISA).
Isa best_isa();
// min(best_isa(), MEDTUNE_ISA): the path dispatched ops take. Read once.
Isa active_isa();
// Parses a MEDTUNE_ISA value; BadInput naming `what` and the accepted names otherwise.
Isa parse_isa(const std::string& s, const std::string& what);
// Whether this CPU can run path `isa`.
bool cpu_supports(Isa isa);

// The -march the generic code was compiled for ("x86-64-v3", "native", ...) and whether this CPU
// has it (a program that starts on a CPU below it exits at once with a message instead of
// crashing on an illegal instruction: core/cpu_baseline_check.cpp).
const char* compiled_baseline();

}  // namespace medtune
