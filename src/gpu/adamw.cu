// AdamW, bit-identical with ops::adamw_update<float> (src/ops/cpu/adamw.cpp, which is in turn
// bit-identical with torch.optim.AdamW on the CPU; the op-by-op derivation is there).
//
// The host forms the scalars in double and rounds each to float exactly as the CPU does; the
// kernel then performs the CPU's float operations in the CPU's order. The CPU never contracts
// (g++, ISO mode) and calls std::fma explicitly in two places: here fmaf in those two places and
// the non-contractible *_rn helpers (vendor.h) everywhere else, so no compiler can fuse a product
// into a neighbouring sum and change a rounding.
#include <cmath>

#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

struct Coefficients {
  float decay_factor;  // 1 − lr·weight_decay
  float lerp_coeff;    // w = 1 − beta1 if |w| < 0.5 else w − 1 (ATen's lerp)
  float beta2;
  float one_minus_beta2;
  float bc2_sqrt;       // (1 − beta2^t)^0.5
  float eps;
  float neg_step_size;  // −lr / (1 − beta1^t)
  int decay;            // weight_decay != 0
  int w_small;          // |1 − beta1| < 0.5
};

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             Coefficients k) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    float param = p[i];
    if (k.decay) param = mul_rn(param, k.decay_factor);
    const float grad = g[i];
    const float mi = fmaf(k.lerp_coeff, sub_rn(grad, m[i]), k.w_small ? m[i] : grad);
    const float vi = fmaf(mul_rn(k.one_minus_beta2, grad), grad, mul_rn(v[i], k.beta2));
    const float denom = add_rn(div_rn(sqrt_rn(vi), k.bc2_sqrt), k.eps);
    p[i] = add_rn(param, div_rn(mul_rn(k.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& cfg,
                  int64_t step, const Stream& stream) {
  if (n == 0) return;
  // The CPU's scalar code, verbatim (optimizer.cpp, adamw_update).
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(cfg.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(cfg.beta2, t);
  const double step_size = cfg.lr / bias_correction1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
  Coefficients k{};
  k.decay = cfg.weight_decay != 0.0 ? 1 : 0;
  k.decay_factor = static_cast<float>(1.0 - cfg.lr * cfg.weight_decay);
  const float w = static_cast<float>(1.0 - cfg.beta1);
  k.w_small = std::abs(w) < 0.5f ? 1 : 0;
  k.lerp_coeff = k.w_small ? w : w - 1.0f;
  k.beta2 = static_cast<float>(cfg.beta2);
  k.one_minus_beta2 = static_cast<float>(1.0 - cfg.beta2);
  k.bc2_sqrt = static_cast<float>(bias_correction2_sqrt);
  k.eps = static_cast<float>(cfg.eps);
  k.neg_step_size = static_cast<float>(-step_size);
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(p, g, m, v, n, k);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
