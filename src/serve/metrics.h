// GET /metrics: Prometheus text exposition (version 0.0.4), the names llama-server and vLLM use
// where they have one, prefixed medtune_. Counters and histograms are updated by the HTTP threads;
// the gauges are read from the engine when scraped.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "serve/engine.h"

namespace medtune::serve {

// Cumulative histogram with fixed bucket bounds (seconds).
struct Histogram {
  static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,    2.5,   5,    10,  30};
  std::array<int64_t, kBounds.size()> counts{};  // observations <= kBounds[i] (not cumulative here)
  int64_t count = 0;
  double sum = 0;
  void observe(double seconds);
};

class Metrics {
 public:
  // One finished request: its route ("/v1/chat/completions"), HTTP status, and duration.
  void request_done(const std::string& route, int status, double seconds);
  void tokens(int64_t prompt, int64_t completion);
  void time_to_first_token(double seconds);
  std::string render(const EngineGauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  Histogram latency_, ttft_;
};

}  // namespace medtune::serve
