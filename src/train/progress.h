// The progress display: one line rewritten in place on a terminal, plain lines otherwise (a log
// file or CI must not fill with carriage returns).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace medtune::train {

struct ProgressState {
  int64_t step = 0, total = 0;
  double loss = 0, lr = 0, tokens_per_s = 0, elapsed_s = 0;
  int64_t rss_bytes = 0;
};

class Progress {
 public:
  // tty: rewrite one line on `term` (stderr); otherwise every update is a line on `log`.
  Progress(std::ostream& log, std::ostream& term, bool tty) : log_(log), term_(term), tty_(tty) {}
  void update(const ProgressState& s);
  // A line that must not be overwritten (eval results, saves): clears the live line first.
  void message(const std::string& line);
  void finish();

  static std::string format(const ProgressState& s);

 private:
  std::ostream& log_;
  std::ostream& term_;
  bool tty_;
  bool live_ = false;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace medtune::train
