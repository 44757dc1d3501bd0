// The optimizer step's kernels. sum_squares (the gradient norm and the finiteness check) against
// ops::sum_squares: every square of a float is exact in double, so the two sums differ only in
// the order of their double additions: |gpu - cpu| <= 2 (n + 30) 2^-53 sum(x^2) (n - 1 roundings
// of the CPU's running sum; at most n per thread plus the 8 levels of the block tree and 10 of the
// 1024 partials on the GPU); the same bits on a second call (a fixed launch shape); Inf and NaN
// elements carry through.
// AdamW against train::adamw_update<float> (the CPU update, itself bit-identical with torch's).
// Tolerance: bit-exact, over several consecutive steps: both sides form the scalars with the same
// double code and perform the same fp32 operations in the same order with no contraction
// (gpu/adamw.cu says how), and IEEE fp32 +, −, ×, ÷, sqrt and fma are correctly rounded on the CPU
// and on both GPU vendors (no fast math in our builds).
#include <cmath>
#include <cstring>
#include <limits>

#include "gpu/ops.h"
#include "op_test.h"
#include "ops/adamw.h"
#include "train/optimizer.h"

namespace medtune::gpu_test {

namespace {

void add_case(Registry& r, int64_t n, double beta1, double weight_decay, bool quick) {
  const std::string name = "adamw/" + shape({{"n", n}}) + ",beta1=" + std::to_string(beta1).substr(0, 4) +
                           ",wd=" + std::to_string(weight_decay).substr(0, 4);
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    train::AdamWConfig cfg;
    cfg.beta1 = beta1;  // 0.9: lerp's small-weight branch; 0.3 (w = 0.7): the other branch
    cfg.weight_decay = weight_decay;
    gpu::AdamWScalars g_cfg;
    g_cfg.beta1 = cfg.beta1;
    g_cfg.beta2 = cfg.beta2;
    g_cfg.eps = cfg.eps;
    g_cfg.weight_decay = cfg.weight_decay;
    std::vector<float> p = random_normals(static_cast<size_t>(n), 61, 0.02f);
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    GuardedDevice<float> d_p(p, s), d_m(m, s), d_v(v, s);
    GuardedDevice<float> d_g(p.size(), s);
    const double lrs[3] = {2e-4, 1.9e-4, 1.7e-4};  // a decaying schedule
    for (int64_t step = 1; step <= 3; ++step) {
      // gradients of mixed scale, including exact zeros (v stays 0 there: denom = eps)
      std::vector<float> g = random_normals(p.size(), static_cast<uint64_t>(62 + step),
                                            static_cast<float>(std::pow(10.0, -static_cast<double>(step))));
      for (size_t i = 0; i < g.size(); i += 7) g[i] = 0.0f;
      gpu::copy_to_device_sync(d_g.data(), g.data(), g.size() * sizeof(float), s);
      const double lr = lrs[step - 1];
      train::adamw_update<float>(p.data(), g.data(), m.data(), v.data(), n, cfg, lr, step);
      g_cfg.lr = lr;
      gpu::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, g_cfg, step, s);
    }
    c.guards("p", d_p, s);
    c.guards("m", d_m, s);
    c.guards("v", d_v, s);
    c.bit_exact("p after 3 steps", d_p.download(s), p);
    c.bit_exact("m after 3 steps", d_m.download(s), m);
    c.bit_exact("v after 3 steps", d_v.download(s), v);
  });
}

void add_sum_squares_case(Registry& r, int64_t n, bool quick) {
  r.add("sum_squares/" + shape({{"n", n}}), quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> x = random_normals(static_cast<size_t>(n), 71, 0.05f);
    GuardedDevice<float> d_x(x, s);
    const double init = 0.25;
    const double want = ops::sum_squares(x.data(), n, init);
    const double got = gpu::sum_squares(d_x.data(), n, init, s);
    const double bound = 2.0 * (static_cast<double>(n) + 30.0) * std::ldexp(1.0, -53) * want;
    c.record(std::abs(got - want) <= bound, "sum " + std::to_string(got) + " against the CPU's " +
                                                std::to_string(want) + " within " + std::to_string(bound));
    const double again = gpu::sum_squares(d_x.data(), n, init, s);
    c.record(std::memcmp(&again, &got, sizeof got) == 0, "a second call gives the same bits");
    c.guards("x", d_x, s);
    if (n >= 3) {  // a non-finite element makes the sum non-finite (the update check relies on it)
      const float inf = std::numeric_limits<float>::infinity();
      gpu::copy_to_device_sync(d_x.data() + n / 2, &inf, sizeof inf, s);
      c.record(std::isinf(gpu::sum_squares(d_x.data(), n, init, s)), "an Inf element gives Inf");
      const float nan = std::numeric_limits<float>::quiet_NaN();
      gpu::copy_to_device_sync(d_x.data() + n - 1, &nan, sizeof nan, s);
      c.record(std::isnan(gpu::sum_squares(d_x.data(), n, init, s)), "a NaN element gives NaN");
    }
  });
}

}  // namespace

void register_adamw_cases(Registry& r) {
  add_sum_squares_case(r, 1, true);
  add_sum_squares_case(r, 1001, true);
  add_sum_squares_case(r, 256 * 1024 + 17, true);  // more blocks than the 1024 cap: threads stride
  add_sum_squares_case(r, (int64_t{1} << 24) + 5, false);
  add_case(r, 1, 0.9, 0.0, true);
  add_case(r, 1001, 0.9, 0.01, true);
  add_case(r, 1001, 0.3, 0.1, true);
  add_case(r, (int64_t{1} << 22) + 3, 0.9, 0.01, false);  // ~ LoRA r16 on q,k,v,o of a 7B model
}

}  // namespace medtune::gpu_test
