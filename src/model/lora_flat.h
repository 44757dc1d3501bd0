// The adapter's matrices one after another in one flat array: A then B of each enabled LoRA
// linear, in layer and projection order (AdamW's parameter order, train/trainer.cpp), each
// starting on a 64-float boundary (256 bytes, cudaMalloc's and hipMalloc's alignment) with zeros
// between. A device keeps its adapter, its gradients and AdamW's moments in arrays of this layout
// (train/train_state.h), and a training pass's gradients too (train_step.cpp), so that a whole
// array moves, sums or reduces as one buffer. dA and dB have the shapes of A and B, so one layout
// serves parameters and gradients.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/lora.h"
#include "model/lora_linear.h"

namespace medtune::model {

class LoraFlatLayout {
 public:
  static constexpr int64_t kAlignFloats = 64;

  explicit LoraFlatLayout(const LoraWeights& lora);

  // Matrices laid out (2 per enabled linear).
  size_t count() const { return offset_.size() - 1; }
  // Start of matrix i in floats; offset(count()) is the array's length, padding included.
  int64_t offset(size_t i) const { return offset_[i]; }
  int64_t total() const { return offset_.back(); }

  // Each enabled projection's {dA, dB} pointers into an array of this layout at `base`,
  // [layer][proj] (the model's TrainOptions::device_grads); null for disabled projections.
  std::vector<std::array<LoraGrad, kNumProj>> grad_table(const LoraWeights& lora,
                                                         float* base) const;

 private:
  std::vector<int64_t> offset_;  // (count() + 1)
};

}  // namespace medtune::model
