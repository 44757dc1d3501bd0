// Token-level generation with a KV cache.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "model/llama.h"
#include "model/sampler.h"

namespace medtune::model {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int64_t> stop_ids;  // generation ends after producing one of these (EOS)
};

// Why generation ended.
enum class StopReason {
  kStopToken,  // the model produced one of opt.stop_ids (it is the last token returned)
  kLength,     // opt.max_new_tokens were produced
  kCaller,     // on_token returned false
};
std::string_view stop_reason_name(StopReason r);  // "stop_token" | "length" | "caller"

// What a run cost, measured as llama.cpp reports it: the prompt pass (prefill) and the token-by-
// token passes (decode) apart, so prompt and decode tokens/s can be compared with its timings.
struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 0;        // tokens returned
  double prompt_seconds = 0;     // the prompt's forward pass
  double first_token_seconds = 0;  // from the start until the first new token was chosen (TTFT)
  int64_t decode_passes = 0;     // one-token forward passes: new_tokens - 1 (the first comes from the prompt pass)
  double decode_seconds = 0;     // those passes, with the sampling of the token each one yields
  StopReason stop = StopReason::kLength;
};

// Returns the new tokens (the prompt excluded). `on_token` (may be empty) is called for each
// new token as soon as it is chosen; returning false stops generation. `stats` (may be null)
// receives the timings and why generation stopped; time spent in on_token is not counted.
std::vector<int32_t> generate(LlamaModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<bool(int32_t)>& on_token = {},
                              GenerateStats* stats = nullptr);

}  // namespace medtune::model
