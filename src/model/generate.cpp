#include "model/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/error.h"

namespace medtune::model {

std::string_view stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kLength: return "length";
    case StopReason::kCaller: return "caller";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<int32_t> generate(LlamaModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats) {
  if (prompt.empty()) throw BadInput("generate: the prompt has no tokens");
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t V = model.config().vocab_size;
  KvCache cache = model.make_cache(1, static_cast<int64_t>(prompt.size()) + opt.max_new_tokens);
  Sampler sampler(opt.sampling);
  std::vector<int32_t> out;
  std::vector<float> logits;
  Batch batch{1, static_cast<int64_t>(prompt.size()), prompt, {}};
  // The prompt in one pass, then one token at a time; only the last position's logits are needed.
  const Clock::time_point start = Clock::now();
  model.forward(batch, cache, logits, {batch.T - 1});
  st.prompt_seconds = seconds_since(start);
  Clock::time_point pass_start = start;
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    // A NaN logit makes every comparison false: greedy would pick token 0 and sampling garbage.
    for (int64_t v = 0; v < V; ++v)
      if (!std::isfinite(logits[static_cast<size_t>(v)]))
        throw BadInput("generate: the logits for token " + std::to_string(i + 1) + " are not finite (token id " +
                       std::to_string(v) + ": " + std::to_string(logits[static_cast<size_t>(v)]) +
                       "): the model's weights or the adapter hold NaN/Inf or overflow; check them with --check-tensors");
    const int32_t next = sampler.next(logits.data(), V);
    if (i == 0)
      st.first_token_seconds = seconds_since(start);
    else
      st.decode_seconds += seconds_since(pass_start);
    out.push_back(next);
    if (on_token && !on_token(next)) {
      st.stop = StopReason::kCaller;
      break;
    }
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) {
      st.stop = StopReason::kStopToken;
      break;
    }
    if (i + 1 == opt.max_new_tokens) {
      st.stop = StopReason::kLength;
      break;
    }
    pass_start = Clock::now();
    batch = Batch{1, 1, {next}, {}};
    model.forward(batch, cache, logits, {0});
    ++st.decode_passes;
  }
  st.new_tokens = static_cast<int64_t>(out.size());
  if (stats) *stats = st;
  return out;
}

}  // namespace medtune::model
