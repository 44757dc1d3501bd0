#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "core/error.h"
#include "serve/api_error.h"
#include "serve/logprobs.h"

namespace medtune::serve {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

// A running job: its slot of the cache, where its prompt stands, its sampler.
struct Engine::Slot {
  std::shared_ptr<Job> job;
  int64_t index = 0;             // its row of the KV cache
  Clock::time_point start;       // admission
  int64_t fed = 0;               // tokens in the cache: prompt tokens read, then generated ones
  int64_t generated = 0;         // tokens sampled
  int32_t next_token = 0;        // the token the next pass feeds, once generating
  std::vector<float> logits;     // (V) the next token's logits
  Job::Event prompt{Job::Event::kPrompt, {}, {}, FinishReason::kLength, {}};  // log-probs so far
  model::Sampler sampler;
  Slot(std::shared_ptr<Job> j, int64_t i) : job(std::move(j)), index(i), start(Clock::now()), sampler(job->spec.sampling) {}
  int64_t prompt_size() const { return static_cast<int64_t>(job->spec.prompt.size()); }
  bool reading_prompt() const { return fed < prompt_size(); }
};

Engine::Engine(model::LlamaModel& model, const EngineOptions& opt) : model_(model), opt_(opt) {
  if (opt.parallel < 1) throw BadInput("--parallel must be at least 1");
  if (opt.ctx_size / opt.parallel < 2)
    throw BadInput("--ctx-size " + std::to_string(opt.ctx_size) + " leaves fewer than 2 positions to each of the " +
                   std::to_string(opt.parallel) + " slots (--parallel): each gets ctx-size / parallel");
  cache_ = model.make_cache(opt.parallel, opt.ctx_size / opt.parallel);
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
    g.running = running_;
  }
  g.kv_used = kv_used_;
  g.kv_capacity = cache_.B * cache_.Smax;
  g.kv_bytes = cache_.bytes();
  return g;
}

void Engine::loop() {
  std::vector<std::unique_ptr<Slot>> slots(static_cast<size_t>(cache_.B));
  while (admit(slots)) {
    try {
      step(slots);
    } catch (const std::exception& e) {
      // The pass itself failed: every running job ends with the error, since the cache's
      // contents are unknown now (logged by the HTTP layer with each request; the client gets a
      // 500 without internals).
      for (auto& s : slots)
        if (s) end(s, FinishReason::kError, e.what());
    }
    int64_t used = 0;
    for (const auto& s : slots)
      if (s) used += s->fed;
    kv_used_ = used;
  }
}

bool Engine::admit(std::vector<std::unique_ptr<Slot>>& slots) {
  std::vector<std::shared_ptr<Job>> refused;  // cancelled while queued, or too long (the service checks first)
  {
    std::unique_lock lock(mu_);
    const auto active = [&] { return std::any_of(slots.begin(), slots.end(), [](const auto& s) { return s != nullptr; }); };
    if (!active()) {
      cv_.wait(lock, [&] { return !queue_.empty() || draining_; });
      if (queue_.empty()) return false;  // draining and nothing left
    }
    for (size_t i = 0; i < slots.size() && !queue_.empty(); ++i) {
      if (slots[i]) continue;
      std::shared_ptr<Job> job = std::move(queue_.front());
      queue_.pop_front();
      const auto P = static_cast<int64_t>(job->spec.prompt.size());
      if (job->cancelled() || P < 1 || P + job->spec.max_tokens > cache_.Smax) {
        refused.push_back(std::move(job));
        --i;  // the slot is still free
        continue;
      }
      slots[i] = std::make_unique<Slot>(std::move(job), static_cast<int64_t>(i));
      ++running_;
      cache_.lengths[i] = 0;  // the slot's old positions are overwritten before they are attended
    }
  }
  for (const auto& job : refused) {
    if (job->cancelled()) job->push(Job::Event{Job::Event::kEnd, {}, {}, FinishReason::kCancelled, {}});
    else job->push(Job::Event{Job::Event::kEnd, {}, {}, FinishReason::kError, "engine: job does not fit a slot of the planned context"});
  }
  return true;
}

void Engine::end(std::unique_ptr<Slot>& slot, FinishReason r, const std::string& error) {
  // The slot is free before the client hears of the end: a client that resubmits at once finds
  // the room, and the gauges no longer count the job.
  const std::shared_ptr<Job> job = std::move(slot->job);
  slot.reset();
  {
    std::lock_guard lock(mu_);
    --running_;
  }
  job->push(Job::Event{Job::Event::kEnd, {}, {}, r, error});
}

void Engine::step(std::vector<std::unique_ptr<Slot>>& slots) {
  const ModelConfig& c = model_.config();
  // What each slot feeds in this pass: (slot, first token's position, token count).
  struct Feed {
    Slot* slot;
    int64_t pos, T;
  };
  std::vector<Feed> feeds;
  int64_t tokens = 0;
  for (auto& s : slots) {  // decodes first: one token each
    if (!s) continue;
    if (s->job->cancelled()) {
      end(s, FinishReason::kCancelled);
      continue;
    }
    if (!s->reading_prompt()) {
      feeds.push_back({s.get(), s->fed, 1});
      ++tokens;
    }
  }
  for (auto& s : slots) {  // then prompt chunks, cut at multiples of kPrefillChunk, while they fit
    if (!s || !s->reading_prompt()) continue;
    const int64_t end_pos = std::min(s->prompt_size(), (s->fed / kPrefillChunk + 1) * kPrefillChunk);
    const int64_t T = end_pos - s->fed;
    if (tokens > 0 && tokens + T > kBatchTokens) continue;
    feeds.push_back({s.get(), s->fed, T});
    tokens += T;
  }
  // A sequence past a sliding window would be computed differently from transformers: that job
  // ends with the error, as a forward call alone would have refused it.
  for (size_t i = 0; i < feeds.size();) {
    try {
      model::check_sliding_window(c, feeds[i].pos + feeds[i].T);
      ++i;
    } catch (const std::exception& e) {
      end(slots[static_cast<size_t>(feeds[i].slot->index)], FinishReason::kError, e.what());
      feeds.erase(feeds.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  if (feeds.empty()) return;
  // Rows grouped by adapter (stable: slot order within a group), one segment each.
  std::stable_sort(feeds.begin(), feeds.end(), [](const Feed& a, const Feed& b) {
    return std::less<const void*>()(a.slot->job->spec.adapter.get(), b.slot->job->spec.adapter.get());
  });
  model::RaggedBatch batch;
  std::vector<int64_t> first_logit_row;  // per feed: its first row among the logits
  for (const Feed& f : feeds) {
    const JobSpec& s = f.slot->job->spec;
    const auto row0 = static_cast<int64_t>(batch.ids.size());
    for (int64_t t = 0; t < f.T; ++t) {
      const int64_t pos = f.pos + t;
      batch.ids.push_back(f.slot->reading_prompt() ? s.prompt[static_cast<size_t>(pos)] : f.slot->next_token);
      batch.slots.push_back(f.slot->index);
      batch.positions.push_back(pos);
    }
    model::LoraWeights* lora = s.adapter ? s.adapter->weights.get() : nullptr;
    if (!batch.adapters.empty() && batch.adapters.back().lora == lora) batch.adapters.back().rows += f.T;
    else batch.adapters.push_back({row0, f.T, lora});
    first_logit_row.push_back(static_cast<int64_t>(batch.logit_rows.size()));
    // Logits wanted: every row of a prompt chunk with prompt log-probs, else the last row of the
    // prompt's last chunk or of a decode step.
    const bool all_rows = f.slot->reading_prompt() && s.prompt_logprobs;
    const bool last_row = !f.slot->reading_prompt() || f.pos + f.T == f.slot->prompt_size();
    for (int64_t t = all_rows ? 0 : f.T - 1; t < f.T && (all_rows || last_row); ++t) batch.logit_rows.push_back(row0 + t);
  }
  std::vector<float> logits;  // (R, V)
  model_.forward_ragged(batch, cache_, logits);
  const int64_t V = c.vocab_size;
  for (size_t i = 0; i < feeds.size(); ++i) {
    Slot& s = *feeds[i].slot;
    std::unique_ptr<Slot>& owner = slots[static_cast<size_t>(s.index)];
    std::optional<FinishReason> done;
    try {
      done = after_pass(s, feeds[i].T, logits.data() + first_logit_row[i] * V);
    } catch (const std::exception& e) {
      end(owner, FinishReason::kError, e.what());
      continue;
    }
    if (done) end(owner, *done);
  }
}

std::optional<FinishReason> Engine::after_pass(Slot& slot, int64_t T, const float* rows) {
  const JobSpec& s = slot.job->spec;
  const int64_t V = model_.config().vocab_size;
  if (slot.reading_prompt()) {
    const int64_t P = slot.prompt_size();
    if (s.prompt_logprobs) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = slot.fed + t;  // its logits predict prompt[pos + 1]
        const float* row = rows + t * V;
        if (pos + 1 < P)
          slot.prompt.prompt.push_back(logprob_of(row, s.prompt[static_cast<size_t>(pos + 1)], std::max<int64_t>(s.top_logprobs, 0)));
        else
          slot.logits.assign(row, row + V);
      }
    } else if (slot.fed + T == P) {
      slot.logits.assign(rows, rows + V);
    }
    slot.fed += T;
    if (slot.reading_prompt()) {
      if (slot.job->cancelled()) return FinishReason::kCancelled;
      return std::nullopt;
    }
    if (s.prompt_logprobs) slot.job->push(std::move(slot.prompt));
    if (s.max_tokens == 0) return FinishReason::kLength;
  } else {
    slot.fed += 1;
    slot.logits.assign(rows, rows + V);
  }
  return sample(slot);
}

std::optional<FinishReason> Engine::sample(Slot& slot) {
  const JobSpec& s = slot.job->spec;
  const int64_t V = model_.config().vocab_size;
  // A NaN logit makes every comparison false: greedy would pick token 0 and sampling garbage.
  for (int64_t v = 0; v < V; ++v)
    if (!std::isfinite(slot.logits[static_cast<size_t>(v)]))
      throw Internal("the logits are not finite (token id " + std::to_string(v) +
                     "): the model's weights or the adapter hold NaN/Inf or overflow");
  const int32_t next = slot.sampler.next(slot.logits.data(), V);
  Job::Event ev{Job::Event::kToken, {}, {}, FinishReason::kLength, {}};
  ev.token.id = next;
  if (s.top_logprobs >= 0) ev.token = logprob_of(slot.logits.data(), next, s.top_logprobs);
  if (slot.generated == 0) slot.job->first_token_seconds = seconds_since(slot.start);
  slot.job->push(std::move(ev));
  ++slot.generated;
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), next) != s.stop_ids.end()) return FinishReason::kStop;
  if (slot.generated >= s.max_tokens || Clock::now() >= s.deadline) return FinishReason::kLength;
  if (slot.job->cancelled()) return FinishReason::kCancelled;
  slot.next_token = next;
  return std::nullopt;
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

}  // namespace medtune::serve
