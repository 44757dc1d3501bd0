// OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels once, when it is loaded, from
// the CPU's vendor, family and model. Debian 12's OpenBLAS 0.3.21 predates some CPUs: on the
// Intel host of the lent H200 machine (AVX-512, AVX-VNNI, AMX) it took "Prescott", its SSE3
// kernels, and an fp32 eval that takes 6 s on two Zen 3 cores ran past 120 s on sixteen. Its AVX2
// kernels on an AVX-512 CPU leave half of the FMA width idle: on two Zen 5 cores, a 512 x 1536 x
// 576 SGEMM ran at 244 GFLOP/s on "Haswell" and 451 on "SkylakeX", an fp32 LoRA training step took
// 1.73x longer (BENCHMARKS.md, session 53; OpenBLAS itself takes Cooperlake there, AVX-512). (A
// 1024^3 SGEMM on two Zen 4 cores: Prescott 44 GFLOP/s, Haswell 155, SkylakeX 182.)
//
// So before main, when OpenBLAS's choice has no kernels for the widest vectors the CPU has (no
// AVX2 kernels on a CPU with AVX2 + FMA, no AVX-512 ones on a CPU with AVX-512 F/BW/VL), medtune
// asks OpenBLAS for the core the CPU can run, through OpenBLAS's own mechanism: the
// OPENBLAS_CORETYPE variable its selection reads, set only while gotoblas_dynamic_init() runs
// again. A user who set OPENBLAS_CORETYPE keeps their choice, even below what the CPU runs (the
// session-53 host set OPENBLAS_CORETYPE=Haswell for every program on a Zen 5): `medtune doctor`
// then says what medtune would have selected. It prints both names.
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

// OpenBLAS's x86 cores whose kernels stop at AVX2 (0.3.21: "Zen" is Haswell's kernels with other
// block sizes).
bool lacks_avx512_kernels(const std::string& core) {
  const std::string c = lower(core);
  return lacks_avx2_kernels(core) || c == "haswell" || c == "zen";
}

BlasCore select_at_start() {
  BlasCore core;
  core.detected = openblas_get_corename();
  core.active = core.detected;
  const std::string want = better_blas_core(core.detected, cpu_features());
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"); user != nullptr) {  // the user's choice
    if (!want.empty())
      core.environment_note = std::string("OPENBLAS_CORETYPE=") + user +
                              " in the environment keeps OpenBLAS on " + core.detected +
                              "; medtune would select " + want +
                              " for this CPU (unset it for faster fp32 GEMMs)";
    return core;
  }
  if (want.empty()) return core;
  const std::string got = reselect_blas_core(want);
  if (got.empty()) return core;
  core.active = got;
  core.reason = "OpenBLAS detected " + core.detected +
                (want == "SkylakeX" ? " (no AVX-512 kernels)" : " (no AVX2 kernels)") +
                " on a CPU with " + (want == "SkylakeX" ? "AVX-512" : "AVX2 + FMA") +
                ": medtune selected " + got;
  return core;
}

}  // namespace

// Priority 200: after core/cpu_baseline_check.cpp's check (101), before ordinary static
// initializers; OpenBLAS's own constructor has run (a library initializes before its users).
// extern "C" with a fixed name: a program that never calls blas_core() would not link this object
// out of libmedtune_ops.a at all (until session 54 only `medtune` and test_ops did, so the
// benchmarks, medtune-parity and the other tests ran on OpenBLAS's Prescott kernels on an Intel
// CPU it does not know); CMakeLists.txt asks for this symbol (--undefined) in every program that
// links medtune_ops.
extern "C" __attribute__((constructor(200))) void medtune_select_blas_core() {
  (void)medtune::ops::blas_core();
}

std::string better_blas_core(const std::string& detected, const CpuFeatures& f) {
  if (f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl)
    return lacks_avx512_kernels(detected) ? "SkylakeX" : "";
  return f.avx2 && f.fma && lacks_avx2_kernels(detected) ? "Haswell" : "";
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
