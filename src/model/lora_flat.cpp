#include "model/lora_flat.h"

namespace medtune::model {

LoraFlatLayout::LoraFlatLayout(const LoraWeights& lora) : offset_(1, 0) {
  const auto padded = [](int64_t n) {
    return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  };
  for (const auto& layer : lora.layers)
    for (const LoraLinear& ll : layer) {
      if (!ll.enabled()) continue;
      offset_.push_back(offset_.back() + padded(ll.r * ll.in));   // A (r, in)
      offset_.push_back(offset_.back() + padded(ll.out * ll.r));  // B (out, r)
    }
}

std::vector<std::array<LoraGrad, kNumProj>> LoraFlatLayout::grad_table(const LoraWeights& lora,
                                                                       float* base) const {
  std::vector<std::array<LoraGrad, kNumProj>> table(lora.layers.size());
  size_t i = 0;
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (size_t p = 0; p < kNumProj; ++p) {
      if (!lora.layers[l][p].enabled()) continue;
      table[l][p] = {base + offset_[i], base + offset_[i + 1]};
      i += 2;
    }
  return table;
}

}  // namespace medtune::model
