// Cross-entropy over given logits, against ops::cross_entropy_sum (log-sum-exp in double) and
// ops::ref::cross_entropy_backward<float> (double inside, one rounding).
//
// Error model of the GPU row (u = 2^-24, the unit roundoff; expf within 2 ulp = 4u, logf 1 ulp = 2u;
// first order, worst case): the max is exact; z − max rounds with error ≤ u·|z − max|, which
// e^(·) turns into a relative error ≤ R·u, R = max_v |z_v − max| (the row's range), plus expf's
// 4u; the fp32 sum of V positive terms adds K·u with K = ceil(V/256) + 8 (reduce.h). So
// Σ e^(z − max) is within (K + 4 + R)·u relative.
//  loss = (max + log Σ) − z_y: log Σ errs by (K + 4 + R)·u absolute plus logf's 2u·|log Σ|, and
//    the two sums by ≤ 2u·(|max| + |log Σ| + |z_y|):
//    |Δloss| ≤ u·(K + 4 + R + 4·(|max| + |log Σ| + |z_y|)), checked with a factor 2.
//  dz_v = p_v·scale − [v = y]·scale: p_v·scale is within (K + 2R + 10)·u relative (the
//    exponential, the sum, one division, one product), the subtraction rounds once:
//    |Δdz_v| ≤ u·((K + 2R + 10)·p_v·|scale| + |dz_v|), checked with a factor 2.
// Rows with target −100 must give exactly 0 (loss and gradient).
#include <algorithm>
#include <cmath>

#include "gpu/ops.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

std::vector<int64_t> make_targets(int64_t N, int64_t V) {
  const std::vector<uint8_t> r = random_bytes(static_cast<size_t>(N) * 4, 51);
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (size_t i = 0; i < t.size(); ++i) {
    const uint32_t x = static_cast<uint32_t>(r[4 * i]) | static_cast<uint32_t>(r[4 * i + 1]) << 8 |
                       static_cast<uint32_t>(r[4 * i + 2]) << 16 | static_cast<uint32_t>(r[4 * i + 3]) << 24;
    t[i] = static_cast<int64_t>(x % static_cast<uint32_t>(V));
  }
  for (size_t i = 1; i < t.size(); i += 5) t[i] = -100;  // HF's ignore index
  return t;
}

struct RowInfo {
  double max, lse, range;
};
RowInfo row_info(const float* z, int64_t V) {
  double mx = z[0], mn = z[0];
  for (int64_t v = 1; v < V; ++v) {
    mx = std::max(mx, static_cast<double>(z[v]));
    mn = std::min(mn, static_cast<double>(z[v]));
  }
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - mx);
  return {mx, std::log(sum), mx - mn};
}

void add_case(Registry& r, int64_t N, int64_t V, float stddev, bool quick) {
  const std::string dims = shape({{"N", N}, {"V", V}});
  const double K = static_cast<double>((V + 255) / 256 + 8);
  r.add("cross_entropy_forward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    const std::vector<float> z = random_normals(static_cast<size_t>(N * V), 52, stddev);
    const std::vector<int64_t> t = make_targets(N, V);
    std::vector<float> ref(static_cast<size_t>(N));
    std::vector<double> bound(ref.size());
    for (int64_t n = 0; n < N; ++n) {
      const ops::LossSum one = ops::cross_entropy_sum(z.data() + n * V, t.data() + n, 1, V);
      ref[static_cast<size_t>(n)] = static_cast<float>(one.sum);
      const RowInfo ri = row_info(z.data() + n * V, V);
      const double zy = t[static_cast<size_t>(n)] >= 0 ? static_cast<double>(z[static_cast<size_t>(n * V + t[static_cast<size_t>(n)])]) : 0.0;
      bound[static_cast<size_t>(n)] = t[static_cast<size_t>(n)] < 0 ? 0.0
          : 2 * kU * (K + 4 + ri.range + 4 * (std::fabs(ri.max) + std::fabs(ri.lse) + std::fabs(zy))) +
            kU * std::fabs(one.sum);  // + rounding the double reference to float
    }
    GuardedDevice<float> d_z(z, s), d_loss(ref.size(), s);
    GuardedDevice<int64_t> d_t(t, s);
    gpu::cross_entropy_forward(d_loss.data(), d_z.data(), d_t.data(), N, V, s);
    const std::vector<float> loss = d_loss.download(s);
    c.guards("losses", d_loss, s);
    c.nan_agreement("losses", loss, ref);
    c.within("losses (ignored rows exactly 0)", loss, ref, bound);
    // The mean as the trainer forms it: sum of rows in double over the count of targets.
    const ops::LossSum all = ops::cross_entropy_sum(z.data(), t.data(), N, V);
    double sum = 0, sum_bound = 0;
    for (size_t i = 0; i < loss.size(); ++i) {
      sum += static_cast<double>(loss[i]);
      sum_bound += bound[i];
    }
    c.record(std::fabs(sum - all.sum) <= sum_bound + 1e-12,
             "sum of rows " + std::to_string(sum) + " vs cross_entropy_sum " + std::to_string(all.sum) +
                 " (count " + std::to_string(all.count) + ")");
  });
  r.add("cross_entropy_backward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    const std::vector<float> z = random_normals(static_cast<size_t>(N * V), 53, stddev);
    const std::vector<int64_t> t = make_targets(N, V);
    const float scale = 1.0f / 37.0f;
    std::vector<float> ref(z.size());
    ops::ref::cross_entropy_backward<float>(ref.data(), z.data(), t.data(), N, V, scale);
    std::vector<double> bound(z.size());
    for (int64_t n = 0; n < N; ++n) {
      const RowInfo ri = row_info(z.data() + n * V, V);
      for (int64_t v = 0; v < V; ++v) {
        const size_t i = static_cast<size_t>(n * V + v);
        const double p = std::exp(static_cast<double>(z[i]) - ri.max - ri.lse);
        bound[i] = t[static_cast<size_t>(n)] < 0 ? 0.0
            : 2 * kU * ((K + 2 * ri.range + 10) * p * static_cast<double>(scale) + std::fabs(static_cast<double>(ref[i])));
      }
    }
    GuardedDevice<float> d_z(z, s), d_dz(z.size(), s);
    GuardedDevice<int64_t> d_t(t, s);
    gpu::cross_entropy_backward(d_dz.data(), d_z.data(), d_t.data(), N, V, scale, s);
    const std::vector<float> dz = d_dz.download(s);
    // Aliasing: the gradient written over the logits.
    gpu::cross_entropy_backward(d_z.data(), d_z.data(), d_t.data(), N, V, scale, s);
    const std::vector<float> dz_alias = d_z.download(s);
    c.guards("dlogits", d_dz, s);
    c.nan_agreement("dlogits", dz, ref);
    c.within("dlogits (ignored rows exactly 0)", dz, ref, bound);
    c.bit_exact("dlogits aliasing logits == dlogits", dz_alias, dz);
  });
}

}  // namespace

void register_cross_entropy_cases(Registry& r) {
  add_case(r, 1, 2, 1.0f, true);
  add_case(r, 7, 1000, 3.0f, true);
  add_case(r, 3, 32000, 2.0f, true);
  add_case(r, 64, 128256, 3.0f, false);  // Llama-3 vocabulary
  add_case(r, 256, 32000, 5.0f, false);  // Llama-2 vocabulary, peaked rows
}

}  // namespace medtune::gpu_test
