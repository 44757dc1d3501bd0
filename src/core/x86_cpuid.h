// The x86 features medtune dispatches on, read from cpuid and XCR0 directly rather than through
// __builtin_cpu_supports: clang 14 (the fuzz build) rejects "f16c", "avxvnni" and "amx-*" there,
// and a feature is only usable when the OS has enabled its register state in XCR0 (AVX's YMM,
// AVX-512's opmask and ZMM, AMX's tiles), which cpuid's feature bits alone do not say.
// Compiled for plain x86-64 (target attribute): core/cpu_baseline_check.cpp calls it before
// knowing whether this CPU has the build's baseline, so it must not use those instructions.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

#include <cstdint>

#include "core/cpu_features.h"

namespace medtune::x86 {

__attribute__((target("arch=x86-64"))) inline uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Bit i of a cpuid register. A named function, not a lambda: a lambda would not inherit the
// target attribute and could be compiled with the baseline's instructions (BMI2's shrx, ...).
__attribute__((target("arch=x86-64"))) inline bool bit(unsigned r, int i) { return ((r >> i) & 1u) != 0; }

// Family and model from cpuid leaf 1's eax, as the vendors define them: the extended family is
// added when the base family is 0xf, the extended model prefixed when it is 0x6 or 0xf.
__attribute__((target("arch=x86-64"))) inline void set_family_model(unsigned eax, CpuFeatures* f) {
  const int base_family = static_cast<int>((eax >> 8) & 0xf),
            base_model = static_cast<int>((eax >> 4) & 0xf);
  f->family = base_family == 0xf ? base_family + static_cast<int>((eax >> 20) & 0xff) : base_family;
  f->model = base_family == 0x6 || base_family == 0xf
                 ? (static_cast<int>((eax >> 16) & 0xf) << 4) | base_model
                 : base_model;
}

__attribute__((target("arch=x86-64"))) inline CpuFeatures read_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return f;
  // The vendor string is ebx, edx, ecx: "AuthenticAMD", "GenuineIntel".
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
  f.intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  set_family_model(a, &f);
  f.sse42 = bit(c, 20);
  const bool osxsave = bit(c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;           // SSE and AVX state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  f.avx = ymm && bit(c, 28);
  f.fma = f.avx && bit(c, 12);
  f.f16c = f.avx && bit(c, 29);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) {
    f.avx2 = f.avx && bit(b, 5);
    f.avx512f = zmm && bit(b, 16);
    f.avx512bw = f.avx512f && bit(b, 30);
    f.avx512vl = f.avx512f && bit(b, 31);
    f.avx512vnni = f.avx512f && bit(c, 11);
    f.amx_bf16 = tiles && bit(d, 22);
    f.amx_tile = tiles && bit(d, 24);
    f.amx_int8 = tiles && bit(d, 25);
    const unsigned max_sub = a;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0) {
      f.avxvnni = f.avx && bit(a, 4);
      f.avx512bf16 = f.avx512f && bit(a, 5);
    }
  }
  return f;
}

}  // namespace medtune::x86
#endif
