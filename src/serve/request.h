// The OpenAI request bodies the server accepts, decoded into typed structs at the edge. Every
// field is checked for type and range against the server's limits; anything wrong throws
// ApiError 400 naming the field (OpenAI's `param`). A known parameter that would change what is
// generated and that the server does not implement (response_format, tools, a grammar, min_p,
// ...) is refused the same way unless its value is the one that changes nothing: a caller who
// asks for JSON or a tool call must not get free text that looks like an answer. Other unknown
// fields are ignored, as llama-server does, so newer clients keep working.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/api_error.h"

namespace medtune::serve {

// What one request may ask for at most (`medtune serve` options).
struct RequestLimits {
  int64_t max_tokens = 4096;       // max_tokens / max_completion_tokens (also capped by the context)
  int64_t max_n = 8;               // choices per prompt
  int64_t max_prompts = 64;        // prompts in one /v1/completions request (lm-eval batches)
  int64_t max_top_logprobs = 20;   // OpenAI's own bound for top_logprobs
  int64_t max_stop = 4;            // stop strings (OpenAI: up to 4)
  int64_t max_stop_bytes = 256;    // each
  int64_t max_messages = 256;
};

// Shared by chat and completions.
struct SamplingRequest {
  std::optional<int64_t> max_tokens;  // absent: until the context is full (llama-server's default)
  float temperature = 1.0f;           // OpenAI's default; 0 = greedy
  float top_p = 1.0f;
  int64_t top_k = 0;                  // llama-server's extension; 0 = off
  float presence_penalty = 0.0f;      // OpenAI's, in [-2, 2] (model::SamplingParams)
  float frequency_penalty = 0.0f;     // OpenAI's, in [-2, 2]
  // OpenAI's logit_bias: (token id, bias in [-100, 100]), ids ascending.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;       // absent: a random seed per request
  std::vector<std::string> stop;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
};

struct ChatMessageRequest {
  std::string role;     // system | user | assistant
  std::string content;  // text parts of an array content are joined
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessageRequest> messages;
  SamplingRequest sampling;
  bool logprobs = false;
  int64_t top_logprobs = 0;
};

// `prompt`: a string, an array of strings, an array of token ids or an array of such arrays;
// each becomes one entry of `prompts` (text) or `prompt_ids` (tokens), never both.
struct CompletionRequest {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;
  bool echo = false;
  std::optional<int64_t> logprobs;  // legacy completions: how many top alternatives (0 = the token's own only)
  SamplingRequest sampling;
  size_t prompt_count() const { return prompts.empty() ? prompt_ids.size() : prompts.size(); }
};

// Throws ApiError 400 for invalid JSON or any invalid field. `vocab_size` bounds token ids (the
// prompt's and logit_bias's).
ChatRequest decode_chat_request(std::string_view body, const RequestLimits& limits,
                                int64_t vocab_size);
CompletionRequest decode_completion_request(std::string_view body, const RequestLimits& limits,
                                            int64_t vocab_size);

}  // namespace medtune::serve
