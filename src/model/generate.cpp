#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace medtune::model {

std::vector<int32_t> generate(LlamaModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) throw BadInput("generate: the prompt has no tokens");
  const int64_t V = model.config().vocab_size;
  KvCache cache = model.make_cache(1, static_cast<int64_t>(prompt.size()) + opt.max_new_tokens);
  Sampler sampler(opt.sampling);
  std::vector<int32_t> out;
  std::vector<float> logits;
  Batch batch{1, static_cast<int64_t>(prompt.size()), prompt, {}};
  // The prompt in one pass, then one token at a time; only the last position's logits are needed.
  model.forward(batch, cache, logits, {batch.T - 1});
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    // A NaN logit makes every comparison false: greedy would pick token 0 and sampling garbage.
    for (int64_t v = 0; v < V; ++v)
      if (!std::isfinite(logits[static_cast<size_t>(v)]))
        throw BadInput("generate: the logits for token " + std::to_string(i + 1) + " are not finite (token id " +
                       std::to_string(v) + ": " + std::to_string(logits[static_cast<size_t>(v)]) +
                       "): the model's weights or the adapter hold NaN/Inf or overflow; check them with --check-tensors");
    const int32_t next = sampler.next(logits.data(), V);
    out.push_back(next);
    if (on_token && !on_token(next)) break;
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) break;
    if (i + 1 == opt.max_new_tokens) break;
    batch = Batch{1, 1, {next}, {}};
    model.forward(batch, cache, logits, {0});
  }
  return out;
}

}  // namespace medtune::model
