// Rotary embedding angles exactly as transformers computes them (LlamaRotaryEmbedding):
// inv_freq in fp32 (optionally rescaled the "llama3" way), angle = fp32(position * inv_freq),
// cos and sin of that fp32 angle.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/config.h"

namespace medtune::model {

// (HD/2) inverse frequencies, llama3 scaling applied when the config asks for it.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// llama.cpp's rope_freqs.weight for a config with llama3 rope scaling: the per-pair divisor of
// the unscaled frequency, as convert_hf_to_gguf.py computes it (in fp32, like its torch code),
// except that the original context length is taken from rope_scaling as transformers takes it
// (the converter reads a top-level key, which Llama-3.x configs do not have: both give 8192 there).
// (HD/2) values; throws Internal when the config has no llama3 scaling.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& c);

// The transformers rope_scaling that gives `c.rope_freq_factors` (a GGUF's rope_freqs.weight):
// llama3 with factor = the largest divisor and Llama 3.x's low_freq_factor 1, high_freq_factor 4,
// original context 8192, when those reproduce every divisor to 1e-6 relative; nullopt otherwise.
std::optional<RopeScaling> llama3_scaling_from_factors(const ModelConfig& c);

// cos, sin: (N, HD/2) for the given positions (N = positions.size()).
void rope_tables(const std::vector<float>& inv_freq, const int64_t* positions, int64_t N,
                 float* cos, float* sin);

}  // namespace medtune::model
