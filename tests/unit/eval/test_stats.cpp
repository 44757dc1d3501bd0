// Statistics against statsmodels / scipy reference values
// (tests/fixtures/eval/stats_reference.json, written by tools/make_eval_fixtures.py), plus the
// definitions' edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/stats.h"

namespace medtune::eval {
namespace {

using nlohmann::json;

const json& reference() {
  static const json j = [] {
    std::ifstream in(MEDTUNE_SOURCE_DIR "/tests/fixtures/eval/stats_reference.json");
    EXPECT_TRUE(in) << "missing stats_reference.json";
    return json::parse(in);
  }();
  return j;
}

// Closed-form arithmetic on the same inputs: agreement to ~1e-15 relative is expected; 1e-12
// leaves room for a different evaluation order without admitting a wrong formula.
constexpr double kTol = 1e-12;

TEST(Wilson, MatchesStatsmodels) {
  EXPECT_EQ(reference().at("z").get<double>(), kZ95);
  ASSERT_GE(reference().at("wilson").size(), 10u);
  for (const auto& c : reference().at("wilson")) {
    const Interval ci = wilson_interval(c.at("k").get<int64_t>(), c.at("n").get<int64_t>());
    EXPECT_NEAR(ci.lo, c.at("lo").get<double>(), kTol) << c.dump();
    EXPECT_NEAR(ci.hi, c.at("hi").get<double>(), kTol) << c.dump();
  }
}

TEST(Wilson, EdgesStayInsideTheUnitInterval) {
  EXPECT_EQ(wilson_interval(0, 50).lo, 0.0);
  EXPECT_EQ(wilson_interval(50, 50).hi, 1.0);
  EXPECT_GT(wilson_interval(0, 50).hi, 0.0);  // unlike Wald, not a zero-width interval
  const Interval none = wilson_interval(0, 0);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 1.0);
  EXPECT_THROW(wilson_interval(5, 4), BadInput);
  EXPECT_THROW(wilson_interval(-1, 4), BadInput);
}

TEST(McNemar, ExactPValueMatchesStatsmodels) {
  ASSERT_GE(reference().at("mcnemar").size(), 10u);
  for (const auto& c : reference().at("mcnemar")) {
    const McNemarResult r = mcnemar_exact(c.at("b").get<int64_t>(), c.at("c").get<int64_t>());
    const double want = c.at("p_value").get<double>();
    EXPECT_EQ(r.statistic, c.at("statistic").get<int64_t>()) << c.dump();
    // lgamma-based terms carry ~1e-13 relative error for n in the thousands.
    EXPECT_NEAR(r.p_value, want, 1e-10 * want + 1e-300) << c.dump();
  }
}

TEST(McNemar, NoDiscordantPairsIsNoEvidence) {
  const McNemarResult r = mcnemar_exact(0, 0);
  EXPECT_EQ(r.p_value, 1.0);
  EXPECT_EQ(r.statistic, 0);
  EXPECT_EQ(mcnemar_exact(3, 12).p_value, mcnemar_exact(12, 3).p_value);  // two-sided: symmetric
  EXPECT_THROW(mcnemar_exact(-1, 2), BadInput);
}

TEST(Ece, MatchesGuoReferenceCodeWithBins) {
  ASSERT_GE(reference().at("ece").size(), 4u);
  for (const auto& c : reference().at("ece")) {
    const auto conf = c.at("confidence").get<std::vector<double>>();
    std::vector<bool> correct;
    for (int v : c.at("correct").get<std::vector<int>>()) correct.push_back(v != 0);
    const Calibration cal = expected_calibration_error(conf, correct);
    EXPECT_NEAR(cal.ece, c.at("ece").get<double>(), kTol);
    EXPECT_NEAR(cal.mce, c.at("mce").get<double>(), kTol);
    const auto& bins = c.at("bins");
    ASSERT_EQ(cal.bins.size(), bins.size());
    for (size_t m = 0; m < bins.size(); ++m) {
      SCOPED_TRACE("bin " + std::to_string(m) + " of case with " + std::to_string(conf.size()));
      EXPECT_EQ(cal.bins[m].lo, bins[m].at("lo").get<double>());
      EXPECT_EQ(cal.bins[m].hi, bins[m].at("hi").get<double>());
      EXPECT_EQ(cal.bins[m].count, bins[m].at("count").get<int64_t>());
      if (cal.bins[m].count == 0) continue;
      EXPECT_NEAR(cal.bins[m].accuracy, bins[m].at("accuracy").get<double>(), kTol);
      EXPECT_NEAR(cal.bins[m].mean_confidence, bins[m].at("mean_confidence").get<double>(), kTol);
    }
  }
}

TEST(Ece, RightClosedBinsAndPerfectCalibration) {
  // 0.3 is in (0.2, 0.3], not (0.3, 0.4]; 1.0 is in the last bin.
  const Calibration edges = expected_calibration_error({0.3, 1.0}, {true, true});
  EXPECT_EQ(edges.bins[2].count, 1);
  EXPECT_EQ(edges.bins[9].count, 1);
  // Each bin's accuracy equals its confidence: ECE 0.
  std::vector<double> conf(10, 0.5);
  std::vector<bool> right = {true, true, true, true, true, false, false, false, false, false};
  EXPECT_NEAR(expected_calibration_error(conf, right).ece, 0.0, 1e-15);
  // Always 90% sure, always wrong: ECE 0.9.
  EXPECT_NEAR(expected_calibration_error({0.9, 0.9}, {false, false}).ece, 0.9, 1e-15);
  EXPECT_THROW(expected_calibration_error({1.5}, {true}), BadInput);
  EXPECT_THROW(expected_calibration_error({NAN}, {true}), BadInput);
  EXPECT_THROW(expected_calibration_error({0.5}, {}), BadInput);
}

TEST(LetterPrior, MatchesNumpyAndBreaksTiesToTheEarlierLetter) {
  for (const auto& c : reference().at("letter_prior")) {
    const LetterPrior p =
        letter_prior(c.at("gold").get<std::vector<int>>(), c.at("num_options").get<int>());
    EXPECT_EQ(p.gold_counts, c.at("gold_counts").get<std::vector<int64_t>>());
    EXPECT_EQ(p.letter, c.at("letter").get<int>());
    EXPECT_EQ(p.correct, c.at("correct").get<int64_t>());
    EXPECT_NEAR(p.accuracy, c.at("accuracy").get<double>(), kTol);
  }
  EXPECT_EQ(letter_prior({1, 1, 3, 3}, 4).letter, 1);
  EXPECT_THROW(letter_prior({0, 4}, 4), BadInput);
}

}  // namespace
}  // namespace medtune::eval
