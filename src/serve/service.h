// The OpenAI API's meaning, apart from HTTP: a decoded request becomes prompts and engine jobs,
// the jobs' tokens become choices (text, stop strings, log-probabilities, usage) written either as
// one JSON body or as server-sent events. http_server.cpp only moves bytes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/adapters.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace medtune::serve {

// Where answers come from: printed in responses so an answer can be traced to its run.
struct BaseModelInfo {
  std::string name;    // the model name of the base (GET /v1/models; "model" selecting no adapter)
  std::string path;    // MODEL as given
  std::string sha256;  // of the model file (a directory: of its files' digests, in name order)
  int64_t created = 0;
};

// A request ready to run: validated, tokenized, its adapter resolved.
struct PreparedRequest {
  bool chat = false;
  std::string id;  // "chatcmpl-..." | "cmpl-..."
  int64_t created = 0;
  std::string model;  // as requested
  std::shared_ptr<const Adapter> adapter;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one per prompt
  SamplingRequest sampling;
  uint64_t seed = 0;           // choice i samples with seed + i
  int64_t max_tokens = 0;      // per choice, checked against the context
  int64_t top_logprobs = -1;   // -1: no logprobs
  bool echo = false;           // completions: the prompt's text (and log-probs) before the answer
  // Generation ends (finish_reason "length") when a choice is still running at this time.
  std::chrono::steady_clock::time_point deadline;
};

class Service {
 public:
  Service(const tokenizer::Tokenizer& tok, const tokenizer::ChatTemplate* chat_template, Engine& engine,
          AdapterRegistry& adapters, Metrics& metrics, BaseModelInfo base, RequestLimits limits);

  // Token ids that end generation (the model's EOS ids).
  void set_stop_ids(std::vector<int64_t> ids);
  // A request's time limit (--timeout): from its arrival to its last token.
  void set_request_timeout(double seconds);

  const RequestLimits& limits() const { return limits_; }
  const BaseModelInfo& base() const { return base_; }
  int64_t vocab_size() const { return static_cast<int64_t>(tok_.vocab_size()); }

  // Throw ApiError: 400 for a field, 404 for an unknown model.
  PreparedRequest prepare(const ChatRequest& r) const;
  PreparedRequest prepare(const CompletionRequest& r) const;

  // One JSON body with every choice. `alive` is polled between tokens: false (the client left)
  // cancels the jobs. Throws ApiError (503 queue full, 500 engine error).
  nlohmann::json run(const PreparedRequest& p, const std::function<bool()>& alive) const;
  // Server-sent events: `write(bytes)` returns false when the client is gone, which cancels the
  // job. Ends with "data: [DONE]". An error after the first event is sent as an error event.
  void stream(const PreparedRequest& p, const std::function<bool(std::string_view)>& write) const;

  // The provenance of the model a request selects: {"model", "model_sha256", "adapter", ...};
  // and its compact form for the X-Medtune-Provenance header and system_fingerprint.
  nlohmann::json provenance(const PreparedRequest& p) const;
  std::string fingerprint(const PreparedRequest& p) const;

  nlohmann::json models() const;          // GET /v1/models
  nlohmann::json tokenizer_info() const;  // GET /tokenizer_info (vLLM's; lm-eval's remote tokenizer)
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;

 private:
  struct Choice;
  // Submits choice `index` of prompt `prompt_index` to the engine (throws ApiError 503 when full).
  std::shared_ptr<Job> start_choice(const PreparedRequest& p, size_t prompt_index, int64_t index) const;
  // Reads that job to its end; `on_delta(text, token)` is called for each piece of text shown
  // (token: its log-prob entry, or null) and returns false to cancel.
  Choice collect_choice(const PreparedRequest& p, size_t prompt_index, Job& job,
                        const std::function<bool(const std::string&, const TokenLogprob*)>& on_delta) const;
  // Calls each(prompt_index, i, job) for every choice in index order (prompt-major, then the n
  // choices), with up to --parallel of the request's jobs in the engine at once, so that a
  // request's choices share forward passes as concurrent requests do (same tokens: the engine is
  // batch-invariant). each returns false to stop; jobs not read by then are cancelled.
  void for_each_choice(const PreparedRequest& p, const std::function<bool(size_t, int64_t, Job&)>& each) const;
  std::shared_ptr<const Adapter> resolve_model(const std::string& name) const;
  void finish_prepare(PreparedRequest& out, const std::string& param) const;
  nlohmann::json chat_logprob_entry(const TokenLogprob& t) const;
  nlohmann::json completion_logprobs(const Choice& c, const std::vector<int32_t>& prompt) const;
  std::string piece(int32_t id) const;

  const tokenizer::Tokenizer& tok_;
  const tokenizer::ChatTemplate* template_;
  Engine& engine_;
  AdapterRegistry& adapters_;
  Metrics& metrics_;
  BaseModelInfo base_;
  RequestLimits limits_;
  std::vector<int64_t> stop_ids_;
  double timeout_seconds_ = 600;
};

}  // namespace medtune::serve
