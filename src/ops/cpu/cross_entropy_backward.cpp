// Cross-entropy backward to the logits.
//
// Derivation, one row with target y: L = lse(z) − z_y, ∂lse/∂z_v = softmax(z)_v, so
//   ∂L/∂z_v = softmax(z)_v − [v = y];   the objective is scale·Σ_n L_n, hence the factor scale.
// Rows with target < 0 are not in the objective: zero gradient.
#include <cmath>
#include <vector>

#include "ops/backward.h"
#include "ops/cpu/row_loss.h"
#include "ops/cpu/vec_exp.h"

namespace medtune::ops {

namespace ref {
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                            int64_t V, T scale) {
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T* dz = dlogits + n * V;
    if (targets[n] < 0) {
      for (int64_t v = 0; v < V; ++v) dz[v] = T(0);
      continue;
    }
    double mx = static_cast<double>(z[0]);
    for (int64_t v = 1; v < V; ++v) mx = std::fmax(mx, static_cast<double>(z[v]));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - mx);
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(static_cast<double>(z[v]) - mx) / sum;
      dz[v] = static_cast<T>((p - (v == targets[n] ? 1.0 : 0.0)) * static_cast<double>(scale));
    }
  }
}
template void cross_entropy_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t,
                                            float);
template void cross_entropy_backward<double>(double*, const double*, const int64_t*, int64_t,
                                             int64_t, double);
}  // namespace ref

LossSum cross_entropy_loss_backward(float* dlogits, const float* logits, const int64_t* targets,
                                    int64_t N, int64_t V, float scale) {
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);  // (N), 0 for ignored rows
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    float* dz = dlogits + n * V;  // may be z itself: every element is read before it is written
    const int64_t y = targets[n];
    if (y < 0) {
      for (int64_t v = 0; v < V; ++v) dz[v] = 0.0f;
      continue;
    }
    const float zy = z[y];  // read before dz (maybe z) is overwritten
    const float mx = detail::row_max(z, V, z[0]);  // fmax's value, 8 lanes at a time
    // exp in fp32, the sum in double: V ~ 1e5 fp32 additions would lose ~sqrt(V)·2^-24 ~ 2e-5
    // relative, too close to the 1e-10 NMSE tolerance; a double add per element is free next to
    // exp. The exps are parked in dz (z is fully read for the max already, and element v of z is
    // read before element v of dz is written, so aliasing is safe).
    const double sum = detail::exp_shifted_sum_f64(dz, z, V, mx);
    row_loss[static_cast<size_t>(n)] = static_cast<double>(mx) + std::log(sum) - static_cast<double>(zy);
    const float k = static_cast<float>(static_cast<double>(scale) / sum);
    for (int64_t v = 0; v < V; ++v) dz[v] *= k;
    dz[y] -= scale;
  }
  return detail::sum_target_rows(row_loss, targets, N);
}

void cross_entropy_backward(float* dlogits, const float* logits, const int64_t* targets, int64_t N,
                            int64_t V, float scale) {
  cross_entropy_loss_backward(dlogits, logits, targets, N, V, scale);
}

}  // namespace medtune::ops
