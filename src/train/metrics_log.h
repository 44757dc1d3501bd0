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
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Resident set size of this process (bytes), from /proc/self/statm; 0 where unavailable.
int64_t rss_bytes();

}  // namespace medtune::train
