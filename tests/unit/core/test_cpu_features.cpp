// Run-time CPU detection and the kernel-path choice (core/cpu_features.h).
#include <gtest/gtest.h>

#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/x86_cpuid.h"

namespace medtune {
namespace {

TEST(CpuFeatures, PathsAreOrderedAndTheActiveOneIsSupported) {
  EXPECT_TRUE(cpu_supports(Isa::kScalar));
  // A faster path implies the slower ones (each needs AVX2 + FMA + F16C under it).
  if (cpu_supports(Isa::kAvxVnni) || cpu_supports(Isa::kAvx512Vnni)) {
    EXPECT_TRUE(cpu_supports(Isa::kAvx2));
  }
  EXPECT_TRUE(cpu_supports(best_isa()));
  EXPECT_TRUE(cpu_supports(active_isa()));
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(best_isa()));
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(cpu_supports(Isa::kAvx2), f.avx2 && f.fma && f.f16c);
  RecordProperty("best_path", isa_name(best_isa()));
}

TEST(CpuFeatures, NamesRoundTripAndBadNamesAreRefusedByName) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni})
    EXPECT_EQ(parse_isa(isa_name(isa), "MEDTUNE_ISA"), isa);
  try {
    parse_isa("avx3", "MEDTUNE_ISA");
    ADD_FAILURE() << "accepted avx3";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("MEDTUNE_ISA: 'avx3' is not a kernel path; use scalar, avx2"),
              std::string::npos)
        << e.what();
  }
}

TEST(CpuFeatures, FeatureNamesListWhatWasDetected) {
  CpuFeatures f;
  EXPECT_TRUE(cpu_feature_names(f).empty());
  f.avx2 = f.avx512vnni = true;
  const std::vector<std::string> names = cpu_feature_names(f);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "avx2");
  EXPECT_EQ(names[1], "avx512vnni");
}

#if defined(__x86_64__) && defined(__GNUC__)
// Signatures (cpuid leaf 1, eax) of CPUs these tests have run on, with the family and model
// /proc/cpuinfo printed there.
TEST(CpuFeatures, FamilyAndModelDecodeAsTheVendorsDefineThem) {
  const struct {
    unsigned eax;
    int family, model;
  } cpus[] = {
      {0x00A10F11u, 25, 17},  // AMD EPYC Zen 4 (Genoa): base family 0xf + extended 0xa
      {0x00A00F11u, 25, 1},   // AMD EPYC Zen 3 (Milan)
      {0x00B00F21u, 26, 2},   // AMD EPYC Zen 5 (Turin)
      {0x000C06F2u, 6, 207},  // Intel Xeon (Emerald Rapids): extended model 0xc prefixed
      {0x00000F41u, 15, 4},   // Intel Pentium 4: base family 0xf, no extended family
      {0x00000633u, 6, 3},    // Intel Pentium II: family 6, extended model 0
      {0x00000543u, 5, 4},    // family 5: the extended model bits are not read
  };
  for (const auto& c : cpus) {
    CpuFeatures f;
    x86::set_family_model(c.eax, &f);
    EXPECT_EQ(f.family, c.family) << std::hex << c.eax;
    EXPECT_EQ(f.model, c.model) << std::hex << c.eax;
  }
}
#endif

}  // namespace
}  // namespace medtune
