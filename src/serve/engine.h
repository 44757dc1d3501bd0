// The engine under the server: one thread that owns the model and a KV cache planned at start
// (--ctx-size positions), and a bounded FIFO queue of generation jobs from the HTTP threads.
//
// Scheduling today: one job computes at a time, in arrival order (a serialising scheduler). Jobs
// do not yet share forward passes: LlamaModel::forward runs every row of a batch at the same
// positions (one KvCache::length), so rows of different lengths would need per-row positions in
// the model first. A job's output therefore cannot depend on what else is queued.
//
// A job never sees another's adapter: the engine thread sets the job's own adapter (or none) on
// the model before each of the job's passes, and nothing else touches the model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/llama.h"
#include "model/sampler.h"
#include "serve/adapters.h"

namespace medtune::serve {

// One token with its log-probability under the model (log-softmax of the raw logits, as OpenAI and
// vLLM report it, whatever the temperature), and the `top` most likely alternatives.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct JobSpec {
  std::shared_ptr<const Adapter> adapter;  // null: the base model
  std::vector<int32_t> prompt;             // (P), 1 <= P < ctx_size
  int64_t max_tokens = 0;                  // new tokens at most; 0: the prompt only (echo)
  model::SamplingParams sampling;
  std::vector<int64_t> stop_ids;           // end of generation (EOS); the stop token is returned
  int64_t top_logprobs = -1;               // -1: no log-probabilities; k >= 0: the token's and k alternatives
  bool prompt_logprobs = false;            // also each prompt token's (after the first), given what precedes it
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

enum class FinishReason { kStop, kLength, kCancelled, kError };

// What a job produces, read by the HTTP thread that submitted it, in this order: prompt log-probs
// (once, when asked for), tokens as they are chosen, then the end.
class Job {
 public:
  explicit Job(JobSpec job_spec) : spec(std::move(job_spec)) {}
  const JobSpec spec;

  struct Event {
    enum Kind { kPrompt, kToken, kEnd } kind;
    TokenLogprob token;                   // kToken
    std::vector<TokenLogprob> prompt;     // kPrompt: entries for prompt[1..P)
    FinishReason finish = FinishReason::kLength;  // kEnd
    std::string error;                    // kEnd with kError
  };
  // Blocks until the next event; false after the end event has been returned.
  bool next(Event& e);
  // The client left, or a stop string ended the text: the engine stops at its next token.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Engine side.
  void push(Event e);
  double first_token_seconds = 0;  // from the start of its run; set by the engine before the first token event

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool ended_ = false;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int64_t ctx_size = 0;     // KV positions, planned at start: prompt + new tokens of one job
  int64_t queue_size = 64;  // jobs waiting or running at most; one more is refused with 503
};

// What /metrics reports about the engine.
struct EngineGauges {
  int64_t queued = 0, running = 0;
  int64_t kv_used = 0, kv_capacity = 0;  // positions
  int64_t kv_bytes = 0;
};

class Engine {
 public:
  Engine(model::LlamaModel& model, const EngineOptions& opt);
  ~Engine();  // drain()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues `job`; throws ApiError 503 when the queue is full or the engine is draining.
  void submit(const std::shared_ptr<Job>& job);
  // Throws the ApiError 503 that submit() would throw now (a stream checks before it sends its
  // 200 headers; submit() may still refuse it if others arrive in between).
  void check_room() const;
  // Refuses new jobs, finishes the queued ones, stops the thread.
  void drain();

  int64_t ctx_size() const { return opt_.ctx_size; }
  EngineGauges gauges() const;

 private:
  void loop();
  void run(Job& job);
  // logits (V) -> the chosen/asked token's log-prob and the k best (k = spec.top_logprobs).
  TokenLogprob logprob_of(const float* logits, int32_t id, int64_t k) const;

  model::LlamaModel& model_;
  EngineOptions opt_;
  model::KvCache cache_;  // (L, 1, ctx_size, NKV, HD): allocated once, reused by every job
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool draining_ = false;
  std::atomic<int64_t> running_{0}, kv_used_{0};
  std::thread thread_;
};

}  // namespace medtune::serve
