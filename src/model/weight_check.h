// A checkpoint's weights checked for NaN and Inf before they are used (llama.cpp's
// --check-tensors): a NaN norm weight or an Inf scale in a quantized block otherwise surfaces, if
// at all, as a NaN log-probability far from its cause. Every element is decoded as the model
// decodes it (dequantize_row), so a bad block scale is found as the values it produces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/checkpoint.h"

namespace medtune::model {

struct NonFiniteWeight {
  std::string tensor;     // Hugging Face name (the checkpoint's key)
  std::string file_name;  // the name in the file (a GGUF's own name), when it differs
  int64_t element = 0;    // flat index of the first non-finite element
  int64_t block = -1;     // its quantization block (quantized types), else -1
  float value = 0.0f;
};

// The first non-finite element in tensor-name order, or nullopt. Floating, ggml-quantized and NF4
// tensors are checked; integer tensors hold no floats.
std::optional<NonFiniteWeight> find_nonfinite_weight(const io::Checkpoint& ckpt);

// Throws BadInput naming the checkpoint, the tensor, its file name and the block.
void check_weights_finite(const io::Checkpoint& ckpt);

}  // namespace medtune::model
