// AdamW against train::adamw_update<float> (the CPU update, itself bit-identical with torch's).
// Tolerance: bit-exact, over several consecutive steps: both sides form the scalars with the same
// double code and perform the same fp32 operations in the same order with no contraction
// (gpu/adamw.cu says how), and IEEE fp32 +, −, ×, ÷, sqrt and fma are correctly rounded on the CPU
// and on both GPU vendors (no fast math in our builds).
#include <cmath>

#include "gpu/ops.h"
#include "op_test.h"
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

}  // namespace

void register_adamw_cases(Registry& r) {
  add_case(r, 1, 0.9, 0.0, true);
  add_case(r, 1001, 0.9, 0.01, true);
  add_case(r, 1001, 0.3, 0.1, true);
  add_case(r, (int64_t{1} << 22) + 3, 0.9, 0.01, false);  // ~ LoRA r16 on q,k,v,o of a 7B model
}

}  // namespace medtune::gpu_test
