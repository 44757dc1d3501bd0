#include "train/metrics_log.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace medtune::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw BadInput(path + ": cannot write the metrics log (check output_dir)");
}

MetricsLog::MetricsLog(const std::string& path, int64_t keep_bytes) : path_(path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {  // no log yet
    open_append();
    return;
  }
  // A log shorter than recorded (lost with the page cache in a crash) is kept as it is.
  if (keep_bytes >= 0 && static_cast<uintmax_t>(keep_bytes) < size) {
    std::filesystem::resize_file(path, static_cast<uintmax_t>(keep_bytes), ec);
    if (ec) throw BadInput(path + ": cannot shorten the metrics log: " + ec.message());
  }
  bytes_ = static_cast<int64_t>(std::min<uintmax_t>(size, static_cast<uintmax_t>(std::max<int64_t>(keep_bytes, 0))));
  open_append();
}

void MetricsLog::open_append() {
  out_.open(path_, std::ios::app);
  if (!out_) throw BadInput(path_ + ": cannot write the metrics log (check output_dir)");
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + '\n';
  out_ << line;
  bytes_ += static_cast<int64_t>(line.size());
  out_.flush();
  for (const auto& sink : sinks_) sink->record(record);
}

void MetricsLog::started(int64_t step, int64_t total_steps) {
  for (const auto& sink : sinks_) sink->started(step, total_steps);
}

void MetricsLog::checkpoint_saved(int64_t step) {
  for (const auto& sink : sinks_) sink->checkpoint_saved(step);
}

int64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace medtune::train
