// Paired comparison of two evaluation runs on the same questions. Both runs answered the same
// items, so the right test is McNemar's on the discordant pairs, not a comparison of two
// independent intervals (which ignores the pairing and is far less sensitive).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace medtune::eval {

// Reads two predictions files (a run directory means <dir>/predictions.jsonl), matches the
// questions by id and returns:
//   {"a": {"path", "accuracy": {correct, n, value, ci95}}, "b": {...}, "n",
//    "difference": acc_b - acc_a,
//    "a_right_b_wrong" (McNemar's b), "a_wrong_b_right" (c), "both_right", "both_wrong",
//    "mcnemar": {"statistic": min(b, c), "p_value", "method": "exact binomial, two-sided"}}
// Throws BadInput if the id sets differ (listing up to five missing ids each way) or if a
// question's gold answer differs between the runs (they were scored on different data).
nlohmann::json compare_runs(const std::string& run_a, const std::string& run_b);

// A few lines for a terminal, e.g.
//   A  runs/base/predictions.jsonl   412/1272  32.4%  (95% CI 29.9-35.0%)
//   B  runs/lora/predictions.jsonl   455/1272  35.8%  (95% CI 33.2-38.4%)
//   B - A: +3.4 points; A right & B wrong: 61, A wrong & B right: 104
//   exact McNemar test (two-sided): p = 0.0010
std::string render_comparison_text(const nlohmann::json& comparison);

}  // namespace medtune::eval
