// OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels once, when it is loaded, from
// the CPU's vendor, family and model. Debian 12's OpenBLAS 0.3.21 predates some CPUs: on the
// Intel host of the lent H200 machine (AVX-512, AVX-VNNI, AMX) it took "Prescott", its SSE3
// kernels, and an fp32 eval that takes 6 s on two Zen 3 cores ran past 120 s on sixteen. (Here,
// a 1024^3 SGEMM on two Zen 4 cores: Prescott 44 GFLOP/s, Haswell 155, SkylakeX 182.)
//
// So before main, when OpenBLAS's choice has no AVX2 kernels on a CPU with AVX2 + FMA, medtune
// asks OpenBLAS for the core the CPU can run, through OpenBLAS's own mechanism: the
// OPENBLAS_CORETYPE variable its selection reads, set only while gotoblas_dynamic_init() runs
// again. A user who set OPENBLAS_CORETYPE keeps their choice. `medtune doctor` prints both names.
#include "ops/cpu/blas_core.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

// Exported by DYNAMIC_ARCH builds of OpenBLAS (driver/others/dynamic.c); weak, so that another
// BLAS build links too and is left as it is.
extern "C" __attribute__((weak)) void gotoblas_dynamic_init(void);
extern "C" __attribute__((weak)) void gotoblas_dynamic_quit(void);

namespace medtune::ops {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// OpenBLAS's x86 cores without AVX2 kernels (0.3.21's names, driver/others/dynamic.c). A name
// not listed (a newer core this list does not know) is left alone rather than replaced.
bool lacks_avx2_kernels(const std::string& core) {
  const std::string c = lower(core);
  for (const char* name : {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2",
                           "penryn", "dunnington", "nehalem", "sandybridge", "athlon", "opteron",
                           "opteron_sse3", "barcelona", "nano", "bobcat", "bulldozer", "piledriver",
                           "steamroller", "excavator"})
    if (c == name) return true;
  return false;
}

BlasCore select_at_start() {
  BlasCore core;
  core.detected = openblas_get_corename();
  core.active = core.detected;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return core;  // the user's choice
  const std::string want = better_blas_core(core.detected, cpu_features());
  if (want.empty()) return core;
  const std::string got = reselect_blas_core(want);
  if (got.empty()) return core;
  core.active = got;
  core.reason = "OpenBLAS detected " + core.detected + " (no AVX2 kernels) on a CPU with " +
                (want == "SkylakeX" ? "AVX-512" : "AVX2 + FMA") + ": medtune selected " + got;
  return core;
}

// Priority 200: after core/cpu_baseline_check.cpp's check (101), before ordinary static
// initializers; OpenBLAS's own constructor has run (a library initializes before its users).
__attribute__((constructor(200))) void select_blas_core_before_main() { (void)blas_core(); }

}  // namespace

std::string better_blas_core(const std::string& detected, const CpuFeatures& f) {
  if (!lacks_avx2_kernels(detected) || !(f.avx2 && f.fma)) return "";
  return f.avx512f && f.avx512bw && f.avx512vl ? "SkylakeX" : "Haswell";
}

std::string reselect_blas_core(const std::string& name) {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return "";
  // OpenBLAS reads the variable only inside gotoblas_dynamic_init(); the process's environment is
  // restored after it, so that programs medtune starts see what the user set.
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before != nullptr ? before : "";
  setenv("OPENBLAS_CORETYPE", name.c_str(), 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (before != nullptr)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  return openblas_get_corename();
}

const BlasCore& blas_core() {
  static const BlasCore core = select_at_start();
  return core;
}

}  // namespace medtune::ops
