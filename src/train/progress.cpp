#include "train/progress.h"

#include <cmath>
#include <cstdio>

namespace medtune::train {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  return buf;
}

std::string Progress::format(const ProgressState& s) {
  const double per_step = s.step > 0 ? s.elapsed_s / static_cast<double>(s.step) : 0.0;
  const double eta = per_step * static_cast<double>(s.total - s.step);
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.4f  lr %.3e  %.0f tok/s  ETA %s  mem %.0f MiB",
                static_cast<long long>(s.step), static_cast<long long>(s.total), s.loss, s.lr,
                s.tokens_per_s, format_duration(eta).c_str(),
                static_cast<double>(s.rss_bytes) / (1024.0 * 1024.0));
  return buf;
}

void Progress::update(const ProgressState& s) {
  if (tty_) {
    term_ << "\r\033[K" << format(s) << std::flush;
    live_ = true;
  } else {
    log_ << format(s) << "\n" << std::flush;
  }
}

void Progress::message(const std::string& line) {
  if (live_) {
    term_ << "\r\033[K" << std::flush;
    live_ = false;
  }
  log_ << line << "\n" << std::flush;
}

void Progress::finish() {
  if (live_) term_ << "\n" << std::flush;
  live_ = false;
}

}  // namespace medtune::train
