// Metrics, predictions files and run comparison on the synthetic runs of
// tests/fixtures/eval/run_{a,b}.jsonl against the values tools/make_eval_fixtures.py computed with
// statsmodels (Wilson, McNemar) and Guo et al.'s ECE code (run_expected.json).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "eval/compare.h"
#include "eval/metrics.h"
#include "eval/report_json.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtures = MEDTUNE_SOURCE_DIR "/tests/fixtures/eval/";
constexpr double kTol = 1e-12;

const json& expected() {
  static const json j = json::parse(std::ifstream(kFixtures + "run_expected.json"));
  return j;
}

void expect_wilson(const Accuracy& got, const json& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.correct, want.at("k").get<int64_t>());
  EXPECT_EQ(got.n, want.at("n").get<int64_t>());
  EXPECT_NEAR(got.ci95.lo, want.at("lo").get<double>(), kTol);
  EXPECT_NEAR(got.ci95.hi, want.at("hi").get<double>(), kTol);
}

class RunMetrics : public ::testing::TestWithParam<std::string> {};

TEST_P(RunMetrics, MatchReferenceValues) {
  const std::string run = GetParam();
  const json& want = expected().at(run);
  const auto results = read_predictions_jsonl(kFixtures + run + ".jsonl");
  const Metrics m = compute_metrics(results, expected().at("num_options").get<int>());
  EXPECT_EQ(m.count, want.at("count").get<int64_t>());
  expect_wilson(m.accuracy, want.at("accuracy"), "accuracy");
  EXPECT_EQ(m.has_acc_norm, want.contains("acc_norm"));
  if (want.contains("acc_norm")) expect_wilson(m.acc_norm, want.at("acc_norm"), "acc_norm");
  ASSERT_EQ(m.by_meta_info.size(), want.at("by_meta_info").size());
  for (size_t i = 0; i < m.by_meta_info.size(); ++i) {
    EXPECT_EQ(m.by_meta_info[i].name, want.at("by_meta_info")[i].at("name").get<std::string>());
    expect_wilson(m.by_meta_info[i].accuracy, want.at("by_meta_info")[i], m.by_meta_info[i].name);
  }
  EXPECT_EQ(m.pred_counts, want.at("predicted_counts").get<std::vector<int64_t>>());
  EXPECT_EQ(m.prior.gold_counts,
            want.at("letter_prior").at("gold_counts").get<std::vector<int64_t>>());
  EXPECT_EQ(m.prior.letter, want.at("letter_prior").at("letter").get<int>());
  EXPECT_NEAR(m.prior.accuracy, want.at("letter_prior").at("accuracy").get<double>(), kTol);
  ASSERT_TRUE(m.has_calibration);
  EXPECT_NEAR(m.calibration.ece, want.at("calibration").at("ece").get<double>(), kTol);
  for (size_t b = 0; b < m.calibration.bins.size(); ++b)
    EXPECT_EQ(m.calibration.bins[b].count,
              want.at("calibration").at("bins")[b].at("count").get<int64_t>());
  EXPECT_EQ(m.indistinguishable_from_prior, m.accuracy.ci95.lo <= m.prior.accuracy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RunMetrics, ::testing::Values("run_a", "run_b"));

TEST(Metrics, FixtureRunsCoverBothSidesOfTheGuessingWarning) {
  const auto a = compute_metrics(read_predictions_jsonl(kFixtures + "run_a.jsonl"), 4);
  const auto b = compute_metrics(read_predictions_jsonl(kFixtures + "run_b.jsonl"), 4);
  EXPECT_TRUE(a.indistinguishable_from_prior);
  EXPECT_FALSE(b.indistinguishable_from_prior);
  const json j = metrics_json(a);
  EXPECT_TRUE(j.at("indistinguishable_from_letter_prior").get<bool>());
  EXPECT_TRUE(j.at("acc_norm").is_null());
  EXPECT_EQ(j.at("letter_distribution").at("letters"), json({"A", "B", "C", "D"}));
  EXPECT_EQ(j.at("calibration").at("bins").size(), 10u);
}

QuestionResult result(const std::string& id, int gold, int pred,
                      std::vector<double> logprobs = {}) {
  QuestionResult r;
  r.id = id;
  r.gold = gold;
  r.pred = pred;
  r.option_logprobs = std::move(logprobs);
  return r;
}

TEST(Metrics, ValidatesResultsNamingTheQuestion) {
  try {
    compute_metrics({result("q:1", 0, 0), result("q:2", 4, 0)}, 4);
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_STREQ(e.what(), "question 'q:2': gold 4 is not in 0-3");
  }
  EXPECT_THROW(compute_metrics({result("q:1", 0, 0, {-1, -2, -3})}, 4), BadInput);  // 3 of 4
  // Probabilities for some questions only would make ECE silently cover a subset.
  EXPECT_THROW(compute_metrics({result("q:1", 0, 0, {-1, -2, -3, -4}), result("q:2", 0, 0)}, 4),
               BadInput);
  QuestionResult bad_probs = result("q:1", 0, 0);
  bad_probs.option_probs = {0.5, 0.5, 0.5, 0.5};
  EXPECT_THROW(compute_metrics({bad_probs}, 4), BadInput);
  EXPECT_THROW(compute_metrics({}, 4), BadInput);
}

TEST(Metrics, UnansweredCountsAsWrongAndSoftmaxComesFromLogprobs) {
  const double inf = std::numeric_limits<double>::infinity();
  const Metrics m =
      compute_metrics({result("q:1", 1, -1, {std::log(0.7), std::log(0.3), -inf, -inf}),
                       result("q:2", 1, 1, {std::log(0.1), std::log(0.9), -inf, -inf})},
                      4);
  EXPECT_EQ(m.accuracy.correct, 1);
  EXPECT_EQ(m.unanswered, 1);
  EXPECT_EQ(m.pred_counts, (std::vector<int64_t>{0, 1, 0, 0}));
  // Confidences 0.7 (argmax A, wrong) and 0.9 (B, right): ECE = (0.7 + 0.1) / 2.
  EXPECT_NEAR(m.calibration.ece, 0.4, 1e-12);
}

TEST(PredictionsFile, RoundTripsIncludingMinusInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  QuestionResult r = result("dev.jsonl:7", 2, 1, {-0.5, -1.25, -inf, -3.0});
  r.meta_info = "step1";
  r.pred_norm = 2;
  const std::string dir = medtune::testing::scratch_dir("eval_roundtrip").string();
  fs::create_directories(dir);
  write_predictions_jsonl(dir + "/" + kPredictionsName, {r, result("dev.jsonl:8", 0, -1)});
  const auto back = read_predictions_jsonl(dir);  // a directory means <dir>/predictions.jsonl
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].id, "dev.jsonl:7");
  EXPECT_EQ(back[0].meta_info, "step1");
  EXPECT_EQ(back[0].gold, 2);
  EXPECT_EQ(back[0].pred, 1);
  EXPECT_EQ(back[0].pred_norm, 2);
  EXPECT_EQ(back[0].option_logprobs, r.option_logprobs);
  EXPECT_EQ(back[0].option_probs, softmax(r.option_logprobs));
  EXPECT_EQ(back[1].pred, -1);
  const json line = question_result_json(r);
  EXPECT_EQ(line.at("gold"), "C");
  EXPECT_EQ(line.at("pred"), "B");
  EXPECT_FALSE(line.at("correct").get<bool>());
  EXPECT_TRUE(line.at("option_logprobs")[2].is_null());
}

TEST(PredictionsFile, RejectsDuplicateIdsAndBadLetters) {
  const std::string dir = medtune::testing::scratch_dir("eval_badpred").string();
  fs::create_directories(dir);
  std::ofstream(dir + "/dup.jsonl") << R"({"id": "x", "gold": "A", "pred": "B"})"
                                       "\n"
                                       R"({"id": "x", "gold": "A", "pred": "A"})"
                                       "\n";
  try {
    read_predictions_jsonl(dir + "/dup.jsonl");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/dup.jsonl:2: duplicate id 'x'");
  }
  std::ofstream(dir + "/letter.jsonl") << R"({"id": "x", "gold": "a", "pred": "B"})"
                                          "\n";
  EXPECT_THROW(read_predictions_jsonl(dir + "/letter.jsonl"), BadInput);
}

TEST(CompareRuns, PairedCountsAndExactMcNemarMatchStatsmodels) {
  const json c = compare_runs(kFixtures + "run_a.jsonl", kFixtures + "run_b.jsonl");
  const json& want = expected().at("compare");
  EXPECT_EQ(c.at("a_right_b_wrong"), want.at("a_right_b_wrong"));
  EXPECT_EQ(c.at("a_wrong_b_right"), want.at("a_wrong_b_right"));
  EXPECT_EQ(c.at("both_right"), want.at("both_right"));
  EXPECT_EQ(c.at("both_wrong"), want.at("both_wrong"));
  EXPECT_EQ(c.at("mcnemar").at("statistic"), want.at("statistic"));
  const double p = want.at("p_value").get<double>();
  EXPECT_NEAR(c.at("mcnemar").at("p_value").get<double>(), p, 1e-10 * p);
  EXPECT_NEAR(
      c.at("difference").get<double>(),
      (want.at("a_wrong_b_right").get<double>() - want.at("a_right_b_wrong").get<double>()) / 200.0,
      1e-15);
  const std::string text = render_comparison_text(c);
  EXPECT_NE(text.find("A right & B wrong: 24, A wrong & B right: 91"), std::string::npos) << text;
  EXPECT_NE(text.find("exact McNemar test (two-sided): p = 2.26e-10"), std::string::npos) << text;
}

TEST(CompareRuns, DifferentQuestionSetsListMissingIds) {
  const std::string dir = medtune::testing::scratch_dir("eval_compare").string();
  fs::create_directories(dir);
  write_predictions_jsonl(dir + "/a.jsonl",
                          {result("q:1", 0, 0), result("q:2", 1, 0), result("q:3", 1, 1)});
  write_predictions_jsonl(dir + "/b.jsonl", {result("q:1", 0, 0), result("q:4", 1, 0)});
  try {
    compare_runs(dir + "/a.jsonl", dir + "/b.jsonl");
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()),
              "runs cover different questions: 2 only in " + dir +
                  "/a.jsonl ('q:2', 'q:3'); 1 only in " + dir +
                  "/b.jsonl ('q:4'); compare runs on the same question file");
  }
  write_predictions_jsonl(dir + "/c.jsonl",
                          {result("q:1", 2, 0), result("q:2", 1, 0), result("q:3", 1, 1)});
  EXPECT_THROW(compare_runs(dir + "/a.jsonl", dir + "/c.jsonl"), BadInput);  // gold differs
}

TEST(Report, WrapsMetricsAndProvenance) {
  const Metrics m = compute_metrics(read_predictions_jsonl(kFixtures + "run_b.jsonl"), 4);
  const json report = make_report(m, {{"model", "tiny"}, {"data_sha256", "ab12"}});
  EXPECT_EQ(report.at("format"), "medtune-eval-report");
  EXPECT_EQ(report.at("metrics"), metrics_json(m));
  EXPECT_EQ(report.at("provenance").at("model"), "tiny");
  EXPECT_THROW(make_report(m, json::array()), BadInput);
}

}  // namespace
}  // namespace medtune::eval
