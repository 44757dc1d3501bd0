// Machine-readable outputs of an evaluation run:
//   report.json        {"format": "medtune-eval-report", "format_version": 1,
//                       "metrics": metrics_json(...), "provenance": {...caller's fields...}}
//   predictions.jsonl  one line per question, in the order scored:
//                      {"id", "meta_info", "gold": "C", "pred": "A" | null, "correct",
//                       "option_logprobs": [...], "option_probs": [...], "pred_norm"?: "B"}
// Letters, not indices, so a clinician can read the file next to the question set. A log-
// probability of -inf (an option the model cannot produce) is written as null, since JSON has no
// infinities, and read back as -inf.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/metrics.h"

namespace medtune::eval {

inline constexpr const char* kReportJsonName = "report.json";
inline constexpr const char* kReportHtmlName = "report.html";
inline constexpr const char* kPredictionsName = "predictions.jsonl";

// provenance is the caller's: model, adapter, data path, sha256s, medtune version, prompt format,
// timing ... (any JSON object; the HTML report lists its fields sorted by key). Throws BadInput if
// it is not an object.
nlohmann::json make_report(const Metrics& metrics, const nlohmann::json& provenance);

nlohmann::json question_result_json(const QuestionResult& result);
// Inverse of question_result_json; `where` ("file:line") prefixes error messages.
QuestionResult question_result_from_json(const nlohmann::json& record, const std::string& where);

// Both write atomically (io::atomic_write_file): a crash leaves the old file or the new one.
void write_report_json(const std::string& path, const nlohmann::json& report);
void write_predictions_jsonl(const std::string& path, const std::vector<QuestionResult>& results);

// Reads a predictions file; a directory means <dir>/predictions.jsonl. Throws BadInput naming
// file and line for malformed records or duplicate ids.
std::vector<QuestionResult> read_predictions_jsonl(const std::string& path_or_dir);

}  // namespace medtune::eval
