// Learning-rate schedules against transformers.get_scheduler: tests/fixtures/optim/schedules.json
// (tools/make_optimizer_fixtures.py) holds the lr the optimizer had before each optimizer step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace medtune {
namespace {

using nlohmann::json;

// Both sides evaluate the same float64 expressions in the same order with the same libm cos, so
// they agree exactly in practice; 1e-12 relative allows a different libm's cos (error < 1 ulp of
// a value near 1, amplified at most ~1/lambda ~ 1e3 near the end of a cosine) and nothing more.
constexpr double kRel = 1e-12;

train::ScheduleConfig config_of(const json& c) {
  train::ScheduleConfig cfg;
  cfg.kind = train::parse_schedule_kind(c["name"].get<std::string>());
  cfg.base_lr = c["base_lr"].get<double>();
  cfg.num_warmup_steps = c["num_warmup_steps"].get<int64_t>();
  cfg.num_training_steps = c["num_training_steps"].get<int64_t>();
  const json& kw = c["kwargs"];
  if (kw.contains("num_cycles")) cfg.num_cycles = kw["num_cycles"].get<double>();
  if (kw.contains("min_lr")) cfg.min_lr = kw["min_lr"].get<double>();
  if (kw.contains("min_lr_rate")) cfg.min_lr_rate = kw["min_lr_rate"].get<double>();
  return cfg;
}

TEST(LrSchedule, MatchesTransformersGetScheduler) {
  std::ifstream in(MEDTUNE_SOURCE_DIR "/tests/fixtures/optim/schedules.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/optim/schedules.json";
  const json fx = json::parse(in);
  ASSERT_GE(fx["cases"].size(), 10u);
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c.dump().substr(0, 160));
    const auto cfg = config_of(c);
    const auto want = c["lrs"].get<std::vector<double>>();
    for (size_t s = 0; s < want.size(); ++s) {
      const double got = train::lr_at(cfg, static_cast<int64_t>(s));
      EXPECT_LE(std::abs(got - want[s]), kRel * std::abs(want[s]))
          << "step " << s << ": " << got << " vs " << want[s];
    }
  }
}

TEST(LrSchedule, NamesRoundTrip) {
  for (const char* name :
       {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr"})
    EXPECT_EQ(train::schedule_name(train::parse_schedule_kind(name)), name);
}

TEST(LrSchedule, UnknownNameIsBadInputListingValidOnes) {
  try {
    train::parse_schedule_kind("cosine_with_restart");
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'cosine_with_restart'"), std::string::npos) << msg;
    for (const char* name :
         {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr"})
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(LrSchedule, InvalidSettingsAreBadInput) {
  train::ScheduleConfig cfg;
  cfg.kind = train::ScheduleKind::kCosineWithMinLr;
  cfg.num_training_steps = 10;
  EXPECT_THROW(train::lr_at(cfg, 0), BadInput);  // neither min_lr nor min_lr_rate
  cfg.min_lr = 1e-5;
  cfg.min_lr_rate = 0.1;
  EXPECT_THROW(train::lr_at(cfg, 0), BadInput);  // both
  cfg.min_lr_rate.reset();
  EXPECT_NO_THROW(train::lr_at(cfg, 0));
  cfg.num_warmup_steps = -1;
  EXPECT_THROW(train::lr_at(cfg, 0), BadInput);
  cfg.num_warmup_steps = 0;
  EXPECT_THROW(train::lr_at(cfg, -1), BadInput);
}

}  // namespace
}  // namespace medtune
