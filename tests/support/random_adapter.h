// A LoRA adapter that changes the model: every projection, random A and B (PEFT's own init has
// B = 0, which changes nothing), for tests that must tell adapters apart.
#pragma once

#include <cstdint>
#include <random>

#include "model/config.h"
#include "model/lora.h"

namespace medtune::testing {

inline model::LoraWeights random_adapter(const ModelConfig& c, uint64_t seed) {
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  for (int p = 0; p < model::kNumProj; ++p) lc.targets.push_back(static_cast<model::Proj>(p));
  model::LoraWeights w = model::init_lora(c, lc, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (auto& layer : w.layers)
    for (auto& l : layer)
      for (float& b : l.B) b = nd(rng);
  return w;
}

}  // namespace medtune::testing
