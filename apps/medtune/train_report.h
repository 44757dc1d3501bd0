// report.html in a training run's output_dir (beside adapter/), kept up to date as the run goes:
// a metrics sink (train/metrics_log.h) that re-renders the page from metrics.jsonl
// (eval/training_report.h) and replaces it atomically, so a browser never reads half a page.
#pragma once

#include <chrono>
#include <string>

#include "eval/training_report.h"
#include "train/metrics_log.h"
#include "train/train_config.h"

namespace medtune::cli {

class TrainReportSink : public train::MetricsSink {
 public:
  explicit TrainReportSink(const train::TrainConfig& cfg);
  void started(int64_t step, int64_t total_steps) override;
  // Re-rendered at a logging step or evaluation when the page is 10 s old or more (rendering
  // reads the whole log; a fast run logging every step should not spend its time on the page),
  // and always at the closing summary.
  void record(const nlohmann::json& record) override;
  void checkpoint_saved(int64_t step) override;

  // Where the page is written: <output_dir>/report.html.
  static std::string path_in(const std::string& output_dir);

 private:
  void write();
  std::string metrics_path_, report_path_;
  eval::TrainingRunInfo info_;
  std::chrono::steady_clock::time_point last_write_{};
};

}  // namespace medtune::cli
