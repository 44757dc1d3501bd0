// The Open Medical-LLM suite: the nine tasks of eval/tasks.h run together, one sub-run per task
// (<out>/<task>/report.json, predictions.jsonl, report.html) and a combined report:
//   suite.json  {"format": "medtune-eval-suite", "format_version": 1, "suite": "open-medical-llm",
//                "tasks": [{"task", "data", "n", "accuracy": {correct, n, value, ci95},
//                           "majority_baseline": {"answer", "accuracy"}}, ...],
//                "macro_accuracy": mean of the nine accuracies (the leaderboard's average),
//                "provenance": {...}}
//   suite.md    the same as a table to read
// Data files under --data-dir are named after the task: <task>.jsonl, <task>.json or <task>.csv.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/tasks.h"

namespace medtune::eval {

inline constexpr const char* kSuiteName = "open-medical-llm";
inline constexpr const char* kSuiteJsonName = "suite.json";
inline constexpr const char* kSuiteMarkdownName = "suite.md";

// The data file of each task under `dir`, in the tasks' order. Throws BadInput listing every task
// without a file (and the names looked for), or naming a task with more than one.
std::vector<std::string> find_suite_files(const std::string& dir);

struct SuiteTaskResult {
  const TaskSpec* task = nullptr;
  std::string data;  // the file scored
  Metrics metrics;
};

nlohmann::json suite_report(const std::vector<SuiteTaskResult>& results, const nlohmann::json& provenance);
std::string render_suite_markdown(const nlohmann::json& suite);

// True when `dir` holds a suite.json (so --compare compares suites, not single runs).
bool is_suite_run(const std::string& dir);

// Per task, compare_runs (exact McNemar) on the two suite runs' sub-runs; the nine p-values are
// then adjusted for multiple comparisons by Holm's step-down method (statsmodels multipletests
// method="holm"): sorted ascending p_(1) <= .. <= p_(m), adjusted p_(i) = max over j <= i of
// min(1, (m - j + 1) p_(j)). Returns {"a", "b", "tasks": [{"task", ...compare_runs...,
// "p_holm"}], "macro_accuracy": {"a", "b", "difference"}, "multiple_comparisons": "..."}.
nlohmann::json compare_suites(const std::string& run_a, const std::string& run_b);
std::string render_suite_comparison_text(const nlohmann::json& comparison);

// Holm-Bonferroni adjusted p-values, in the input's order.
std::vector<double> holm_adjust(const std::vector<double>& p);

}  // namespace medtune::eval
