// The engine under the server: one thread that owns the model and a KV cache planned at start,
// and a bounded FIFO queue of generation jobs from the HTTP threads.
//
// Continuous batching: the cache has `parallel` rows ("slots", KvCache B = parallel) of
// ctx_size / parallel positions each, allocated once. Every iteration of the engine thread
//   1. admits queued jobs into free slots (a job cancelled while queued ends there);
//   2. runs ONE forward pass (LlamaModel::forward_ragged) over every active job's next tokens:
//      one decode token per job that is generating, plus prompt chunks of jobs still reading
//      their prompt, up to kBatchTokens tokens (decodes first, so that a long prompt does not
//      stall the others), the rows grouped by adapter (the base GEMMs once over all rows, each
//      adapter's LoRA path on its rows);
//   3. samples per job (its own Sampler and seed), pushes events, and frees the slots of jobs
//      that ended (stop token, max_tokens, deadline, cancel: a client that disconnects frees its
//      slot at the next iteration).
//
// Exactness: a job's logits do not depend on what else is in the batch when the model computes
// on a batch-invariant backend (backend::batch_invariant: `medtune serve` uses it on the CPU when
// --parallel is above 1): its rows go through per-row-invariant products, its attention runs over
// its own slot with the shape it has alone, and its prompt is cut into chunks at fixed offsets
// (multiples of kPrefillChunk) whatever the load, so that the attention's shapes are those of a
// run alone too (on the CPU its attention is fixed-order per query besides, ops.h, so the cut no
// longer matters there; it does for backends whose attention is not known to be invariant).
// Greedy output is then identical alone or batched. A job never sees another's adapter: its rows
// lie in its adapter's segment only.
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
  std::vector<int32_t> prompt;             // (P), 1 <= P < slot_size()
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
  double first_token_seconds = 0;  // from its admission into a slot; set by the engine before the first token event

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool ended_ = false;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int64_t ctx_size = 0;     // KV positions in all, allocated at start; each slot gets ctx_size / parallel
  int64_t parallel = 1;     // slots: jobs computed together in one forward pass
  int64_t queue_size = 64;  // jobs waiting or running at most; one more is refused with 503
};

// Prompt tokens a job feeds in one pass at most; its prompt is cut at multiples of this (fixed
// offsets: see the exactness note above). Also bounds prompt log-probabilities' logits: (chunk, V).
constexpr int64_t kPrefillChunk = 128;
// Tokens of one forward pass at most, unless a single prompt chunk plus the decodes is more.
constexpr int64_t kBatchTokens = 256;

// What /metrics reports about the engine.
struct EngineGauges {
  int64_t queued = 0, running = 0;       // running: jobs holding a slot
  int64_t kv_used = 0, kv_capacity = 0;  // positions, over all slots
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

  // Positions one job may use (prompt + new tokens): ctx_size / parallel.
  int64_t slot_size() const { return cache_.Smax; }
  int64_t parallel() const { return cache_.B; }
  EngineGauges gauges() const;

 private:
  struct Slot;  // engine.cpp: a running job's state
  void loop();
  // Moves queued jobs into free slots; false when the engine should stop (draining, all done).
  bool admit(std::vector<std::unique_ptr<Slot>>& slots);
  // One forward pass over the active slots' next tokens, then their sampling and events.
  void step(std::vector<std::unique_ptr<Slot>>& slots);
  // Reads the logits of the slot's T tokens of the pass (prompt log-probs, next-token logits) and
  // samples when its prompt is done: the job's end reason if it ended, else nothing.
  std::optional<FinishReason> after_pass(Slot& slot, int64_t T, const float* rows);
  std::optional<FinishReason> sample(Slot& slot);
  void end(std::unique_ptr<Slot>& slot, FinishReason r, const std::string& error = {});
  // logits (V) -> the chosen/asked token's log-prob and the k best (k = spec.top_logprobs).
  TokenLogprob logprob_of(const float* logits, int32_t id, int64_t k) const;

  model::LlamaModel& model_;
  EngineOptions opt_;
  model::KvCache cache_;  // (L, parallel, ctx_size / parallel, NKV, HD): allocated once
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool draining_ = false;
  std::atomic<int64_t> running_{0}, kv_used_{0};
  std::thread thread_;
};

}  // namespace medtune::serve
