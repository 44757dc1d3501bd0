// Rotary embedding angles exactly as transformers computes them (LlamaRotaryEmbedding):
// inv_freq in fp32 (optionally rescaled the "llama3" way), angle = fp32(position * inv_freq),
// cos and sin of that fp32 angle.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace medtune::model {

// (HD/2) inverse frequencies, llama3 scaling applied when the config asks for it.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// cos, sin: (N, HD/2) for the given positions (N = positions.size()).
void rope_tables(const std::vector<float>& inv_freq, const int64_t* positions, int64_t N,
                 float* cos, float* sin);

}  // namespace medtune::model
