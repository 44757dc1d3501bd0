// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_(params, max_norm)
// (torch/nn/utils/clip_grad.py), which the Hugging Face Trainer calls with max_grad_norm.
#pragma once

#include <span>

namespace medtune::train {

// sqrt(sum over all tensors and elements of g^2), accumulated in double in a fixed order (tensor
// by tensor, element by element): deterministic for any thread count, and accurate to ~1e-16
// relative where torch's fp32 reduction is accurate to ~1e-7.
double global_grad_norm(std::span<const std::span<float>> grads);

// torch's clip coefficient max_norm / (total_norm + 1e-6) in its fp32 steps (grad_clip.cpp), from
// a norm computed in double. BadInput unless max_norm is finite and > 0.
float clip_coefficient(double total_norm, double max_norm);
// Whether multiplying by `coef` changes the gradients: false only for coef >= 1 (clamped to 1);
// true for NaN (torch multiplies by it).
bool clip_changes_gradients(float coef);

// Scales every gradient by clamp(max_norm / (total_norm + 1e-6), max = 1) with torch's fp32
// arithmetic for the coefficient (see grad_clip.cpp) and returns the pre-clip total norm. A NaN or
// infinite norm is not an error here (torch's error_if_nonfinite defaults to false): the gradients
// become NaN or zero as in torch, and the returned norm lets the caller notice.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);

}  // namespace medtune::train
