// RMSNorm forward and backward against ops::ref (double accumulation, one rounding at the end).
//
// Tolerances, worst case to first order, u = 2^-24, from the GPU's summation (gpu/reduce.h): a
// row sum of C terms is formed as k = ceil(C / 256) serial terms per thread and an 8-level tree
// (256 threads = 8 warps of 32 or 4 of 64: 5+3 or 6+2 levels), so it errs by at most
// K·u·Σ|terms| with K = k + 8.
//  forward: Σx² (positive terms; each square rounds too) relative error ≤ (K + 1)·u; /C, +eps 2u;
//    sqrt halves the relative error and adds u; 1/· adds u: r within (K/2 + 3.5)u; y = w·(x·r) two
//    more roundings; the reference itself rounds r and two products (1.5u). So
//    |y − y_ref| ≤ (K/2 + 7)u·|y| per element and NMSE ≤ ((K/2 + 7)u)², checked against
//    ((K/2 + 8)u)²; rstd within (K/2 + 4)u relative (reference 0.5u), checked against (K/2 + 6)u.
//  backward dx = r·(w⊙dy) − x·k, k = r³/C·Σ w⊙dy⊙x (signed terms: cancellation, so the bound is
//    absolute). The dot's terms round twice and the sum adds K: |Δdot| ≤ (K + 2)u·Σ|w⊙dy⊙x|; k
//    adds 4 roundings, x·k one more; r·(w·dy) rounds twice, the difference once, the reference
//    once: |Δdx_i| ≤ u·(2·|r·w_i·dy_i| + (K + 7)·|x_i|·r³/C·Σ|w⊙dy⊙x| + 1.5·|dx_i|).
//  backward dw_c += Σ_n dy·x·r, summed serially over n on one thread (N + 2 roundings):
//    |Δdw_c| ≤ u·((N + 3)·Σ_n|dy·x·r| + |dw_c|).
// Each componentwise bound gets a factor 2 for second-order terms.
#include <cmath>

#include "gpu/ops.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

constexpr int64_t kRowThreads = 256;  // gpu/launch.h kThreads
double reduction_k(int64_t len) { return static_cast<double>((len + kRowThreads - 1) / kRowThreads + 8); }

void add_case(Registry& r, int64_t N, int64_t C, bool with_nan, bool quick) {
  const std::string dims = shape({{"N", N}, {"C", C}}) + (with_nan ? ",nan_row" : "");
  const float eps = 1e-5f;
  r.add("rmsnorm_forward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> x = random_normals(static_cast<size_t>(N * C), 21, 2.0f);
    if (with_nan) x[static_cast<size_t>(C / 2)] = NAN;  // row 0 becomes NaN on both sides
    const std::vector<float> w = random_floats(static_cast<size_t>(C), 22, 0.5f, 1.5f);
    std::vector<float> y_ref(x.size()), rstd_ref(static_cast<size_t>(N));
    ops::ref::rmsnorm_forward(y_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, eps);
    GuardedDevice<float> dx(x, s), dw(w, s), dy(x.size(), s), drstd(rstd_ref.size(), s);
    gpu::rmsnorm_forward(dy.data(), drstd.data(), dx.data(), dw.data(), N, C, eps, s);
    const std::vector<float> y = dy.download(s), rstd = drstd.download(s);
    const double K = reduction_k(C);
    c.guards("y", dy, s);
    c.guards("rstd", drstd, s);
    c.nan_agreement("y", y, y_ref);
    c.nan_agreement("rstd", rstd, rstd_ref);
    c.nmse("y", y, y_ref, std::pow((K / 2 + 8) * kU, 2));
    c.nmse("rstd", rstd, rstd_ref, std::pow((K / 2 + 6) * kU, 2));
  });

  r.add("rmsnorm_backward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> x = random_normals(static_cast<size_t>(N * C), 23, 2.0f);
    const std::vector<float> w = random_floats(static_cast<size_t>(C), 24, 0.5f, 1.5f);
    std::vector<float> dy = random_normals(x.size(), 25);
    if (with_nan) dy[static_cast<size_t>(C / 3)] = NAN;
    const std::vector<float> dw0 = random_normals(static_cast<size_t>(C), 26, 0.1f);
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(N));
    ops::ref::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    std::vector<float> dx_ref(x.size()), dw_ref = dw0;
    ops::ref::rmsnorm_backward<float>(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(),
                                      rstd.data(), N, C);
    GuardedDevice<float> d_x(x, s), d_w(w, s), d_dy(dy, s), d_rstd(rstd, s), d_dw(dw0, s),
        d_dx(x.size(), s);
    gpu::rmsnorm_backward(d_dx.data(), d_dw.data(), d_dy.data(), d_x.data(), d_w.data(),
                          d_rstd.data(), N, C, s);
    const std::vector<float> dx = d_dx.download(s), dw = d_dw.download(s);
    // Aliasing: dx written over dy gives the same values.
    gpu::rmsnorm_backward(d_dy.data(), nullptr, d_dy.data(), d_x.data(), d_w.data(), d_rstd.data(),
                          N, C, s);
    const std::vector<float> dx_alias = d_dy.download(s);

    const double K = reduction_k(C);
    std::vector<double> bx(x.size()), bw(static_cast<size_t>(C), 0.0);
    std::vector<double> colsum(static_cast<size_t>(C), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const double rn = rstd[static_cast<size_t>(n)];
      double sabs = 0;
      for (int64_t k = 0; k < C; ++k) {
        const size_t i = static_cast<size_t>(n * C + k);
        const double wk = w[static_cast<size_t>(k)], dyi = dy[i], xi = x[i];
        sabs += std::fabs(wk * dyi * xi);
        colsum[static_cast<size_t>(k)] += std::fabs(dyi * xi * rn);
      }
      for (int64_t k = 0; k < C; ++k) {
        const size_t i = static_cast<size_t>(n * C + k);
        const double wk = w[static_cast<size_t>(k)], dyi = dy[i], xi = x[i], ref = dx_ref[i];
        bx[i] = 2 * kU * (2 * std::fabs(rn * wk * dyi) +
                          (K + 7) * std::fabs(xi) * rn * rn * rn / static_cast<double>(C) * sabs +
                          1.5 * std::fabs(ref));
      }
    }
    for (int64_t k = 0; k < C; ++k)
      bw[static_cast<size_t>(k)] = 2 * kU * (static_cast<double>(N + 3) * colsum[static_cast<size_t>(k)] +
                                             std::fabs(static_cast<double>(dw_ref[static_cast<size_t>(k)])));
    c.guards("dx", d_dx, s);
    c.guards("dw", d_dw, s);
    c.guards("dx (aliasing dy)", d_dy, s);
    c.nan_agreement("dx", dx, dx_ref);
    c.nan_agreement("dw", dw, dw_ref);
    c.within("dx", dx, dx_ref, bx);
    c.within("dw", dw, dw_ref, bw);
    c.bit_exact("dx aliasing dy == dx", dx_alias, dx);
  });
}

}  // namespace

void register_rmsnorm_cases(Registry& r) {
  add_case(r, 1, 1, false, true);
  add_case(r, 3, 33, false, true);
  add_case(r, 7, 1000, false, true);
  add_case(r, 4, 100, true, true);
  add_case(r, 512, 4096, false, false);  // Llama-2-7B width, one batch row of 512 tokens
  add_case(r, 5, 8192, false, false);
}

}  // namespace medtune::gpu_test
