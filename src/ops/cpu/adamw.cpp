// ops/adamw.h on the CPU.
#include "ops/adamw.h"

#include <cmath>

namespace medtune::ops {
namespace {

// Element counts from which the update is spread over OpenMP threads. Each element's arithmetic is
// independent of the others, so the result is bit-identical for any thread count.
constexpr int64_t kParallelMin = int64_t{1} << 16;

}  // namespace

// torch/optim/adam.py, _single_tensor_adam with decoupled_weight_decay (AdamW), amsgrad, maximize,
// capturable and differentiable all off. Per parameter it runs these tensor ops; we run the same
// ops per element, because matching them op for op makes the result bit-identical to torch's,
// which a test can then demand (tests/unit/train/test_optimizer.cpp):
//
//   step_t += 1; step = step_t.item()                     Python floats from here ...
//   param.mul_(1 - lr * weight_decay)                     (only if weight_decay != 0)
//   exp_avg.lerp_(grad, 1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   bias_correction1 = 1 - beta1 ** step
//   bias_correction2 = 1 - beta2 ** step
//   step_size = lr / bias_correction1
//   bias_correction2_sqrt = bias_correction2 ** 0.5       ... to here (pow, not sqrt, as Python)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// Each Python float becomes a T where it meets a T tensor (ATen converts a scalar operand to the
// op's compute type, which is float itself for float tensors). The element formulas are ATen's CPU
// kernels: lerp with a scalar weight w is fma(w, end - self, self) when |w| < 0.5 and
// fma(w - 1, end - self, end) otherwise (aten/src/ATen/native/cpu/LerpKernel.cpp, lerp_vec);
// addcmul is written self + value * t1 * t2, which torch's build contracts into
// fma(value * t1, t2, self) (its AVX2/AVX-512 kernels are compiled with FMA enabled and GCC's
// default -ffp-contract=fast; measured: tools/make_optimizer_fixtures.py's float32 and float64
// runs agree with the fma form on every element, body and scalar tail, and not with the
// unfused one); addcdiv is self + (value * t1) / t2 (a division cannot be contracted).
// Our plain expressions are not contracted: the project builds in ISO C++ mode
// (CMAKE_CXX_EXTENSIONS OFF), where g++ defaults to -ffp-contract=off, so the only FMAs are the
// explicit std::fma calls, on every machine. (A torch built without FMA, e.g. on a CPU whose
// ATen capability is DEFAULT, would round addcmul and lerp differently, by an ulp.)
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& cfg, double lr, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(cfg.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(cfg.beta2, t);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);

  const bool decay = cfg.weight_decay != 0.0;
  const T decay_factor = static_cast<T>(1.0 - lr * cfg.weight_decay);
  const T w = static_cast<T>(1.0 - cfg.beta1);
  const bool w_small = std::abs(w) < static_cast<T>(0.5);
  const T lerp_coeff = w_small ? w : w - static_cast<T>(1);
  const T beta2 = static_cast<T>(cfg.beta2);
  const T one_minus_beta2 = static_cast<T>(1.0 - cfg.beta2);
  const T bc2_sqrt = static_cast<T>(bias_correction2_sqrt);
  const T eps = static_cast<T>(cfg.eps);
  const T neg_step_size = static_cast<T>(-step_size);

#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T param = p[i];
    if (decay) param = param * decay_factor;
    const T grad = g[i];
    const T mi = std::fma(lerp_coeff, grad - m[i], w_small ? m[i] : grad);
    const T vi = std::fma(one_minus_beta2 * grad, grad, v[i] * beta2);
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = param + neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, double,
                                  int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&, double,
                                   int64_t);

double sum_squares(const float* x, int64_t n, double init) {
  double sum = init;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

void scale(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace medtune::ops
