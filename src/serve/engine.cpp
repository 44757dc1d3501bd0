#include "serve/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "serve/api_error.h"
#include "serve/logprobs.h"

namespace medtune::serve {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Prompt log-probabilities need every position's logits: (T, V) floats, 200 KB a token for a 50k
// vocabulary. Longer prompts are computed in slices of this many positions.
constexpr int64_t kPromptLogitsChunk = 512;
}  // namespace

bool Job::next(Event& e) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || ended_; });
  if (events_.empty()) return false;
  e = std::move(events_.front());
  events_.pop_front();
  if (e.kind == Event::kEnd) ended_ = true;
  return true;
}

void Job::push(Event e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

Engine::Engine(model::LlamaModel& model, const EngineOptions& opt)
    : model_(model), opt_(opt), cache_(model.make_cache(1, opt.ctx_size)) {
  if (opt.ctx_size < 2) throw BadInput("--ctx-size must be at least 2");
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { drain(); }

namespace {
void check_room_locked(bool draining, int64_t queued, int64_t running, int64_t queue_size) {
  if (draining) throw ApiError(503, "server_shutting_down", "the server is shutting down; retry on another instance");
  if (queued + running >= queue_size)
    throw ApiError(503, "server_busy",
                   "the server's queue is full (" + std::to_string(queue_size) + " requests); retry later");
}
}  // namespace

void Engine::check_room() const {
  std::lock_guard lock(mu_);
  check_room_locked(draining_, static_cast<int64_t>(queue_.size()), running_, opt_.queue_size);
}

void Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mu_);
    check_room_locked(draining_, static_cast<int64_t>(queue_.size()), running_, opt_.queue_size);
    queue_.push_back(job);
  }
  cv_.notify_all();
}

void Engine::drain() {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineGauges Engine::gauges() const {
  EngineGauges g;
  {
    std::lock_guard lock(mu_);
    g.queued = static_cast<int64_t>(queue_.size());
  }
  g.running = running_;
  g.kv_used = kv_used_;
  g.kv_capacity = cache_.Smax;
  g.kv_bytes = cache_.bytes();
  return g;
}

void Engine::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || draining_; });
      if (queue_.empty()) return;  // draining and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = 1;
    }
    try {
      run(*job);
    } catch (const std::exception& e) {
      // Logged by the HTTP layer with the request; the client gets a 500 without internals.
      Job::Event end{Job::Event::kEnd, {}, {}, FinishReason::kError, e.what()};
      job->push(std::move(end));
    }
    model_.set_lora(nullptr);
    kv_used_ = 0;
    running_ = 0;
  }
}

TokenLogprob Engine::logprob_of(const float* logits, int32_t id, int64_t k) const {
  const int64_t V = model_.config().vocab_size;
  const double lse = log_sum_exp(logits, V);
  TokenLogprob t;
  t.id = id;
  t.logprob = static_cast<float>(static_cast<double>(logits[id]) - lse);
  if (k > 0) t.top = top_logprobs(logits, V, k, lse);
  return t;
}

void Engine::run(Job& job) {
  const JobSpec& s = job.spec;
  const Clock::time_point start = Clock::now();
  const int64_t V = model_.config().vocab_size;
  const auto P = static_cast<int64_t>(s.prompt.size());
  if (P < 1 || P + s.max_tokens > cache_.Smax) throw Internal("engine: job does not fit the planned context");
  auto end = [&](FinishReason r) { job.push(Job::Event{Job::Event::kEnd, {}, {}, r, {}}); };
  if (job.cancelled()) return end(FinishReason::kCancelled);

  // The planned cache, emptied: positions past `length` are never attended, and every position
  // a forward call fills is marked valid again by it.
  cache_.length = 0;
  std::fill(cache_.valid.begin(), cache_.valid.end(), uint8_t{0});
  model_.set_lora(s.adapter ? s.adapter->weights.get() : nullptr);

  std::vector<float> logits;  // the next token's logits (V) once the prompt has run
  if (s.prompt_logprobs) {
    Job::Event ev{Job::Event::kPrompt, {}, {}, FinishReason::kLength, {}};
    std::vector<float> chunk;
    for (int64_t t0 = 0; t0 < P; t0 += kPromptLogitsChunk) {
      const int64_t T = std::min(kPromptLogitsChunk, P - t0);
      model::Batch b{1, T, std::vector<int32_t>(s.prompt.begin() + t0, s.prompt.begin() + t0 + T), {}};
      model_.forward(b, cache_, chunk);  // (T, V)
      kv_used_ = cache_.length;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = t0 + t;  // its logits predict prompt[pos + 1]
        const float* row = chunk.data() + t * V;
        if (pos + 1 < P)
          ev.prompt.push_back(logprob_of(row, s.prompt[static_cast<size_t>(pos + 1)], std::max<int64_t>(s.top_logprobs, 0)));
        else
          logits.assign(row, row + V);
      }
      if (job.cancelled()) return end(FinishReason::kCancelled);
    }
    job.push(std::move(ev));
  } else {
    model::Batch b{1, P, s.prompt, {}};
    model_.forward(b, cache_, logits, {P - 1});
    kv_used_ = cache_.length;
  }
  if (s.max_tokens == 0) return end(FinishReason::kLength);

  model::Sampler sampler(s.sampling);
  for (int64_t i = 0;; ++i) {
    // A NaN logit makes every comparison false: greedy would pick token 0 and sampling garbage.
    for (int64_t v = 0; v < V; ++v)
      if (!std::isfinite(logits[static_cast<size_t>(v)]))
        throw Internal("the logits are not finite (token id " + std::to_string(v) +
                       "): the model's weights or the adapter hold NaN/Inf or overflow");
    const int32_t next = sampler.next(logits.data(), V);
    Job::Event ev{Job::Event::kToken, {}, {}, FinishReason::kLength, {}};
    ev.token.id = next;
    if (s.top_logprobs >= 0) ev.token = logprob_of(logits.data(), next, s.top_logprobs);
    if (i == 0) job.first_token_seconds = seconds_since(start);
    job.push(std::move(ev));
    if (std::find(s.stop_ids.begin(), s.stop_ids.end(), next) != s.stop_ids.end()) return end(FinishReason::kStop);
    if (i + 1 >= s.max_tokens || Clock::now() >= s.deadline) return end(FinishReason::kLength);
    if (job.cancelled()) return end(FinishReason::kCancelled);
    model::Batch b{1, 1, {next}, {}};
    model_.forward(b, cache_, logits, {0});
    kv_used_ = cache_.length;
  }
}

}  // namespace medtune::serve
