// metrics.jsonl: one JSON object per line, appended and flushed as training goes, so a crashed or
// stopped run keeps every line it logged (and `tail -f` shows progress).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace medtune::train {

class MetricsLog {
 public:
  // Truncates `path` (a fresh run).
  explicit MetricsLog(const std::string& path);
  // A resumed run: keeps the first `keep_bytes` of `path` (the lines up to the checkpoint it
  // resumes from; later lines belong to steps it will take again) and appends after them.
  MetricsLog(const std::string& path, int64_t keep_bytes);
  void write(const nlohmann::json& record);
  // Length of the file so far (what a checkpoint records as keep_bytes).
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void open_append();
  std::ofstream out_;
  int64_t bytes_ = 0;
};

// Resident set size of this process (bytes), from /proc/self/statm; 0 where unavailable.
int64_t rss_bytes();

}  // namespace medtune::train
