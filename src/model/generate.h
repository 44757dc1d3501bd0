// Token-level generation with a KV cache.
#pragma once

#include <functional>
#include <vector>

#include "model/llama.h"
#include "model/sampler.h"

namespace medtune::model {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int64_t> stop_ids;  // generation ends after producing one of these (EOS)
};

// Returns the new tokens (the prompt excluded). `on_token` (may be empty) is called for each
// new token as soon as it is chosen; returning false stops generation.
std::vector<int32_t> generate(LlamaModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<bool(int32_t)>& on_token = {});

}  // namespace medtune::model
