// Run-time CPU detection and the kernel-path choice (core/cpu_features.h).
#include <gtest/gtest.h>

#include <string>

#include "core/cpu_features.h"
#include "core/error.h"

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

}  // namespace
}  // namespace medtune
