// Before anything else runs: does this CPU have the instruction set the generic code was compiled
// for (MEDTUNE_X86_BASELINE)? Without this check a binary built for x86-64-v3 dies with SIGILL
// somewhere in the first loop on an older CPU; with it, it says what is missing and how to build.
// The check itself is compiled for plain x86-64 (target attribute) so that it can run anywhere,
// and it uses no library code (which the baseline flags compiled).
#include <cstdio>
#include <cstdlib>

#include "core/cpu_features.h"
#include "core/x86_cpuid.h"

#if !defined(MEDTUNE_BASELINE_NAME)
#define MEDTUNE_BASELINE_NAME "default"
#endif

namespace medtune {

const char* compiled_baseline() { return MEDTUNE_BASELINE_NAME; }

}  // namespace medtune

#if defined(__x86_64__) && defined(__GNUC__)
// The macros below describe the flags this file was compiled with (the baseline); the function
// itself runs with plain x86-64 code. Priority 101: before every ordinary static initializer.
// extern "C" with a fixed name: nothing calls it, so a program would link this object out of
// libmedtune_core.a only if asked for it by name; CMakeLists.txt asks (--undefined) for every
// program that links medtune_core.
extern "C" __attribute__((constructor(101), target("arch=x86-64"))) void
medtune_check_cpu_baseline() {
  using namespace medtune;
  const CpuFeatures f = x86::read_cpu_features();
  const char* missing = nullptr;
#if defined(__AVX512F__)
  if (!f.avx512f) missing = "avx512f";
#endif
#if defined(__AVX2__)
  if (!f.avx2) missing = "avx2";
#endif
#if defined(__FMA__)
  if (!f.fma) missing = "fma";
#endif
#if defined(__F16C__)
  if (!f.f16c) missing = "f16c";
#endif
#if defined(__AVX__)
  if (!f.avx) missing = "avx";
#endif
#if defined(__SSE4_2__)
  if (!f.sse42) missing = "sse4.2";
#endif
  if (missing != nullptr) {
    std::fprintf(stderr,
                 "medtune: this CPU lacks %s, which this build requires (compiled for -march=%s). "
                 "Rebuild with -DMEDTUNE_X86_BASELINE=x86-64-v2 (docs/decisions/cpu-dispatch.md).\n",
                 missing, MEDTUNE_BASELINE_NAME);
    std::_Exit(3);
  }
}
#else
// No check where the baseline is the architecture's own; the symbol exists for the linker.
extern "C" void medtune_check_cpu_baseline() {}
#endif
