#include "train/grad_clip.h"

#include <cmath>

#include "core/error.h"
#include "ops/adamw.h"

namespace medtune::train {

double global_grad_norm(std::span<const std::span<float>> grads) {
  double sum = 0.0;
  for (const std::span<float> g : grads) sum = ops::sum_squares(g.data(), static_cast<int64_t>(g.size()), sum);
  return std::sqrt(sum);
}

float clip_coefficient(double total_norm, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw BadInput("gradient clipping: max_grad_norm " + std::to_string(max_norm) +
                   " must be a finite number > 0");
  // torch, with total_norm a float32 0-d tensor:
  //   clip_coef = max_norm / (total_norm + 1e-6)    # Tensor.__rtruediv__: reciprocal() * max_norm
  //   clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
  //   g.mul_(clip_coef_clamped)                     # for every gradient
  // We take the same float32 steps from our (more accurate) norm rounded to float32, so the
  // coefficient differs from torch's only where torch's fp32 norm differs from the rounded one.
  return (1.0f / (static_cast<float>(total_norm) + static_cast<float>(1e-6))) * static_cast<float>(max_norm);
}

bool clip_changes_gradients(float coef) {
  // torch.clamp(max=1) keeps a NaN, and torch multiplies even by 1, which changes nothing: so
  // skip only coefficients that are exactly >= 1 (false for NaN).
  return !(coef >= 1.0f);
}

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  const double total = global_grad_norm(grads);
  const float coef = clip_coefficient(total, max_norm);
  if (!clip_changes_gradients(coef)) return total;
  for (const std::span<float> g : grads) ops::scale(g.data(), static_cast<int64_t>(g.size()), coef);
  return total;
}

}  // namespace medtune::train
