// metrics.jsonl: one JSON object per line, appended and flushed as training goes, so a crashed or
// stopped run keeps every line it logged (and `tail -f` shows progress).
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace medtune::train {

// Something else that follows the run (TensorBoard events, report.html). It is handed every
// record exactly as metrics.jsonl receives it, after the line is on disk, so what it shows is
// what the log holds and the trainer's loop stays about training.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // The run starts at `step` (0, or the checkpoint's step on a resume) of `total_steps`.
  virtual void started(int64_t step, int64_t total_steps) = 0;
  // One metrics.jsonl record: {"step": ...} per logging step, {"eval": {...}}, {"summary": {...}}.
  virtual void record(const nlohmann::json& record) = 0;
  // checkpoint-<step> is complete on disk.
  virtual void checkpoint_saved(int64_t step) = 0;
};

class MetricsLog {
 public:
  // Truncates `path` (a fresh run).
  explicit MetricsLog(const std::string& path);
  // A resumed run: keeps the first `keep_bytes` of `path` (the lines up to the checkpoint it
  // resumes from; later lines belong to steps it will take again) and appends after them.
  MetricsLog(const std::string& path, int64_t keep_bytes);
  // Appends and flushes the line, then hands the record to every sink.
  void write(const nlohmann::json& record);
  void add_sink(std::shared_ptr<MetricsSink> sink) { sinks_.push_back(std::move(sink)); }
  // Passed on to every sink.
  void started(int64_t step, int64_t total_steps);
  void checkpoint_saved(int64_t step);
  // Length of the file so far (what a checkpoint records as keep_bytes).
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void open_append();
  std::ofstream out_;
  int64_t bytes_ = 0;
  std::vector<std::shared_ptr<MetricsSink>> sinks_;
};

// Resident set size of this process (bytes), from /proc/self/statm; 0 where unavailable.
int64_t rss_bytes();

}  // namespace medtune::train
