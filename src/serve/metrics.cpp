#include "serve/metrics.h"

#include <sstream>

namespace medtune::serve {

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) {
      ++counts[i];
      break;
    }
  ++count;
  sum += seconds;
}

void Metrics::request_done(const std::string& route, int status, double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{route, status}];
  latency_.observe(seconds);
}

void Metrics::tokens(int64_t prompt, int64_t completion) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void Metrics::time_to_first_token(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

namespace {

void render_histogram(std::ostringstream& o, const std::string& name, const std::string& help, const Histogram& h) {
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < Histogram::kBounds.size(); ++i) {
    cumulative += h.counts[i];
    o << name << "_bucket{le=\"" << Histogram::kBounds[i] << "\"} " << cumulative << "\n";
  }
  o << name << "_bucket{le=\"+Inf\"} " << h.count << "\n";
  o << name << "_sum " << h.sum << "\n" << name << "_count " << h.count << "\n";
}

}  // namespace

std::string Metrics::render(const EngineGauges& g) const {
  std::lock_guard lock(mu_);
  std::ostringstream o;
  o << "# HELP medtune_requests_total HTTP requests answered, by route and status.\n"
       "# TYPE medtune_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    o << "medtune_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << "\n";
  o << "# HELP medtune_prompt_tokens_total Prompt tokens processed.\n# TYPE medtune_prompt_tokens_total counter\n"
    << "medtune_prompt_tokens_total " << prompt_tokens_ << "\n"
    << "# HELP medtune_tokens_predicted_total Tokens generated.\n# TYPE medtune_tokens_predicted_total counter\n"
    << "medtune_tokens_predicted_total " << completion_tokens_ << "\n";
  render_histogram(o, "medtune_request_duration_seconds", "Time from a request's arrival to its last byte.", latency_);
  render_histogram(o, "medtune_time_to_first_token_seconds", "Time from a job's start on the engine to its first token.", ttft_);
  o << "# HELP medtune_requests_queued Jobs waiting for the engine.\n# TYPE medtune_requests_queued gauge\n"
    << "medtune_requests_queued " << g.queued << "\n"
    << "# HELP medtune_requests_running Jobs holding a KV cache slot (at most --parallel).\n# TYPE medtune_requests_running gauge\n"
    << "medtune_requests_running " << g.running << "\n"
    << "# HELP medtune_kv_cache_used_positions KV cache positions holding running jobs' tokens, over all slots.\n"
       "# TYPE medtune_kv_cache_used_positions gauge\n"
    << "medtune_kv_cache_used_positions " << g.kv_used << "\n"
    << "# HELP medtune_kv_cache_capacity_positions KV cache positions planned at start (--ctx-size).\n"
       "# TYPE medtune_kv_cache_capacity_positions gauge\n"
    << "medtune_kv_cache_capacity_positions " << g.kv_capacity << "\n"
    << "# HELP medtune_kv_cache_bytes Memory of the KV cache, allocated at start.\n# TYPE medtune_kv_cache_bytes gauge\n"
    << "medtune_kv_cache_bytes " << g.kv_bytes << "\n";
  return o.str();
}

}  // namespace medtune::serve
