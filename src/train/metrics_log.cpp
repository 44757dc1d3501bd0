#include "train/metrics_log.h"

#include <unistd.h>

#include "core/error.h"

namespace medtune::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw BadInput(path + ": cannot write the metrics log (check output_dir)");
}

void MetricsLog::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
}

int64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace medtune::train
