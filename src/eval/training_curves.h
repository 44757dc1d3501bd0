// A training run's metrics.jsonl (train/metrics_log.h) as curves against step, and those curves
// drawn as inline SVG line charts: for the run's own report.html (training_report.h) and for
// `medtune eval --compare`, which overlays the training runs of the two adapters it compares.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace medtune::eval {

// The two curve colours of the training pages (report.html, comparison.html); the Chromium test
// counts pixels of these colours.
inline constexpr const char* kCurveBlue = "#2563a8";
inline constexpr const char* kCurveOrange = "#c2410c";

using CurvePoints = std::vector<std::pair<int64_t, double>>;  // (step, value), steps increasing

struct TrainingCurves {
  CurvePoints loss, learning_rate, grad_norm, tokens_per_s, rss_mib;  // per logging step
  CurvePoints eval_loss, eval_accuracy;                                // per evaluation
  std::optional<nlohmann::json> summary;  // the closing {"summary": ...} record, once written
};

// Reads metrics.jsonl. A step logged again (a resumed run continuing an older log) replaces the
// points from that step on, as TensorBoard does. NaN and Inf (logged as null) leave gaps. Throws
// BadInput naming the file, line and field for a line that is not such a record.
TrainingCurves read_training_curves(const std::string& metrics_jsonl_path);

// "running" before the summary; then "finished", or "stopped (signal|max_runtime|diverged)".
std::string run_status(const TrainingCurves& curves);

struct ChartLine {
  std::string label;  // legend text (escaped when drawn)
  std::string color;  // a CSS colour from this code, never from data
  const CurvePoints* points = nullptr;
  bool dashed = false;
};

// One line chart (value against step) with axes, tick labels and a legend; "no data" when every
// line is empty. `title` and labels are escaped.
std::string line_chart_svg(const std::string& title, const std::vector<ChartLine>& lines);

}  // namespace medtune::eval
