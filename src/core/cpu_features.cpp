#include "core/cpu_features.h"

#include <cstdlib>

#include "core/error.h"
#include "core/x86_cpuid.h"

namespace medtune {

namespace {

CpuFeatures detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  return x86::read_cpu_features();
#else
  return {};
#endif
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::vector<std::string> cpu_feature_names(const CpuFeatures& f) {
  std::vector<std::string> names;
  const std::pair<bool, const char*> all[] = {
      {f.sse42, "sse4.2"},         {f.avx, "avx"},           {f.avx2, "avx2"},
      {f.fma, "fma"},              {f.f16c, "f16c"},         {f.avx512f, "avx512f"},
      {f.avx512bw, "avx512bw"},    {f.avx512vl, "avx512vl"}, {f.avx512vnni, "avx512vnni"},
      {f.avx512bf16, "avx512bf16"}, {f.avxvnni, "avxvnni"},  {f.amx_tile, "amx-tile"},
      {f.amx_int8, "amx-int8"},    {f.amx_bf16, "amx-bf16"}};
  for (const auto& [has, name] : all)
    if (has) names.emplace_back(name);
  return names;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvxVnni: return avx2 && f.avxvnni;
    case Isa::kAvx512Vnni: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  }
  return false;
#else
  return isa == Isa::kScalar;  // the per-ISA kernels are x86-64 only
#endif
}

Isa best_isa() {
  for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kAvx2})
    if (cpu_supports(isa)) return isa;
  return Isa::kScalar;
}

Isa parse_isa(const std::string& s, const std::string& what) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni})
    if (s == isa_name(isa)) return isa;
  throw BadInput(what + ": '" + s + "' is not a kernel path; use scalar, avx2, avxvnni or avx512vnni");
}

Isa active_isa() {
  static const Isa isa = [] {
    const Isa best = best_isa();
    const char* env = std::getenv("MEDTUNE_ISA");
    if (env == nullptr || *env == '\0') return best;
    const Isa want = parse_isa(env, "MEDTUNE_ISA");
    if (!cpu_supports(want))
      throw BadInput(std::string("MEDTUNE_ISA: this CPU cannot run the '") + env +
                     "' kernels (its best path is " + isa_name(best) + ")");
    return want;
  }();
  return isa;
}

}  // namespace medtune
