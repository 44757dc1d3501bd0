// SwiGLU forward and backward against ops::ref (double inside, one rounding at the end).
//
// Tolerances (u = 2^-24, the unit roundoff: one fp32 rounding errs by at most u relative; expf is
// within 2 ulp = 4u on NVIDIA, 1 ulp on AMD; first order, worst case):
//  h = g/(1 + e^−g)·up: e^−g 4u, its share in 1 + e^−g ≤ 4u, the sum u, the division u, the
//    product u, the reference's own rounding u/2: ≤ 7.5u relative per element, so NMSE ≤ (7.5u)²;
//    checked against (12u)² for second-order terms.
//  σ = 1/(1 + e^−g) is within 6u. dup = dh·(g·σ): two more products and the reference's rounding,
//    ≤ 8.5u relative: NMSE ≤ (8.5u)², checked against (12u)².
//  dgate = dh·up·(σ·(1 + g·(1 − σ))): 1 − σ cancels as σ → 1 and 1 + g(1 − σ) vanishes near
//    g ≈ −1.28, so the bound is absolute. 1 − σ errs by ≤ 6u·σ + u·(1 − σ) ≤ 7u, times |g|; the
//    remaining roundings (σ's 6u, the sum, three products, the reference's) are relative to the
//    result: |Δ| ≤ u·(|dh·up|·σ·7|g| + 12·|dgate|), checked with a factor 2.
#include <cmath>

#include "gpu/ops.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

void add_case(Registry& r, int64_t n, bool with_nan, bool quick) {
  const std::string dims = shape({{"n", n}}) + (with_nan ? ",nan" : "");
  r.add("swiglu_forward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> g = random_normals(static_cast<size_t>(n), 41, 3.0f);
    const std::vector<float> u = random_normals(static_cast<size_t>(n), 42);
    if (with_nan) g[static_cast<size_t>(n / 2)] = NAN;
    if (n > 2) g[1] = -200.0f;  // e^200 overflows to inf: h must be -0, not NaN
    std::vector<float> ref(g.size());
    ops::ref::swiglu_forward(ref.data(), g.data(), u.data(), n);
    GuardedDevice<float> d_g(g, s), d_u(u, s), d_h(g.size(), s);
    gpu::swiglu_forward(d_h.data(), d_g.data(), d_u.data(), n, s);
    const std::vector<float> h = d_h.download(s);
    c.guards("h", d_h, s);
    c.nan_agreement("h", h, ref);
    c.nmse("h", h, ref, std::pow(12 * kU, 2));
  });
  r.add("swiglu_backward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> g = random_normals(static_cast<size_t>(n), 43, 3.0f);
    const std::vector<float> u = random_normals(static_cast<size_t>(n), 44);
    const std::vector<float> dh = random_normals(static_cast<size_t>(n), 45);
    if (with_nan) g[static_cast<size_t>(n / 3)] = NAN;
    if (n > 2) g[1] = -200.0f;
    std::vector<float> dg_ref(g.size()), du_ref(g.size());
    ops::ref::swiglu_backward<float>(dg_ref.data(), du_ref.data(), dh.data(), g.data(), u.data(), n);
    GuardedDevice<float> d_g(g, s), d_u(u, s), d_dh(dh, s), d_dg(g.size(), s), d_du(g.size(), s);
    gpu::swiglu_backward(d_dg.data(), d_du.data(), d_dh.data(), d_g.data(), d_u.data(), n, s);
    const std::vector<float> dg = d_dg.download(s), du = d_du.download(s);
    // Aliasing: dgate over gate and dup over up, as the trainer does to save buffers.
    gpu::swiglu_backward(d_g.data(), d_u.data(), d_dh.data(), d_g.data(), d_u.data(), n, s);
    const std::vector<float> dg_alias = d_g.download(s), du_alias = d_u.download(s);
    std::vector<double> bound(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double gi = g[i], sig = 1.0 / (1.0 + std::exp(-gi));
      bound[i] = 2 * kU * (std::fabs(static_cast<double>(dh[i]) * static_cast<double>(u[i])) * sig * 7 * std::fabs(gi) +
                           12 * std::fabs(static_cast<double>(dg_ref[i])));
    }
    c.guards("dgate", d_dg, s);
    c.guards("dup", d_du, s);
    c.nan_agreement("dgate", dg, dg_ref);
    c.nan_agreement("dup", du, du_ref);
    c.within("dgate", dg, dg_ref, bound);
    c.nmse("dup", du, du_ref, std::pow(12 * kU, 2));
    c.bit_exact("dgate aliasing gate == dgate", dg_alias, dg);
    c.bit_exact("dup aliasing up == dup", du_alias, du);
  });
}

}  // namespace

void register_swiglu_cases(Registry& r) {
  add_case(r, 1, false, true);
  add_case(r, 1001, false, true);
  add_case(r, 1001, true, true);
  add_case(r, 512 * 11008, false, false);  // Llama-2-7B MLP, 512 tokens
}

}  // namespace medtune::gpu_test
