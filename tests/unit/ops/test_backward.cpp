// Backward ops: the reference path against central finite differences in fp64, and the fast fp32
// path against the reference.
//
// Finite differences. For an op f and a random fixed dy, the scalar objective L(x) = Σ dy ⊙ f(x)
// has gradient dL/dx = the op's backward applied to dy. It is evaluated in double by the fp64
// forwards below (checked against the project's forwards, ForwardF64 tests) and differenced
// centrally, fd_i = (L(x + h e_i) − L(x − h e_i)) / 2h with h = 1e-6:
//  - truncation error h²/6 · ∂³L ~ 1e-12 relative for O(1) derivatives;
//  - roundoff error ~ ε_L / h where ε_L ~ 1e-16·|L| is the rounding error of evaluating L
//    (sums of O(100) terms of size O(1)): ~1e-10 absolute.
// So |g_i − fd_i| ≤ 1e-6·(|g_i| + ‖g‖∞) holds with two to four orders of margin, while a wrong
// derivation (a missing term, a sign, a transposed rotation) errs by O(‖g‖∞). The ‖g‖∞ term is
// there because roundoff is absolute: an element with g_i ~ 0 cannot be checked relatively.
// GradientCheck.CatchesSmallErrors shows the check fails on a 1e-5 relative error in one element.
//
// Fast vs reference (NMSE = Σ(fast − ref)² / Σ ref²), as test_ops.cpp:
//  - elementwise ops (rope, swiglu): 1e-12 — the paths differ by a few fp32 roundings per element
//    (relative 2^-24 ~ 6e-8 each, NMSE ~ 1e-14).
//  - reductions (rmsnorm, attention, cross-entropy): 1e-10 — fp32 sums of K ≤ 4096 terms err by
//    ~sqrt(K)·2^-24 ~ 4e-6 relative, NMSE ~ 2e-11.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "support/buffers.h"

namespace medtune {
namespace {

using testing::Guarded;
using testing::nmse;
using testing::random_vector;
using Vec = std::vector<double>;

constexpr double kFdStep = 1e-6;
constexpr double kFdTolerance = 1e-6;
constexpr double kElementwiseNmse = 1e-12;
constexpr double kReductionNmse = 1e-10;

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
std::vector<float> to_float(const Vec& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return f;
}
double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
size_t sz(int64_t n) { return static_cast<size_t>(n); }

// ---- fp64 forwards: the same formulas as ops::ref, every step in double ----
namespace f64 {
void rmsnorm(Vec& y, Vec& rstd, const Vec& x, const Vec& w, int64_t N, int64_t C, double eps) {
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[sz(n * C + c)] * x[sz(n * C + c)];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    rstd[sz(n)] = r;
    for (int64_t c = 0; c < C; ++c) y[sz(n * C + c)] = w[sz(c)] * (x[sz(n * C + c)] * r);
  }
}

void rope(Vec& x, const Vec& cos, const Vec& sin, int64_t N, int64_t H, int64_t HD) {
  const int64_t half = HD / 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double& lo = x[sz((n * H + h) * HD + i)];
        double& hi = x[sz((n * H + h) * HD + i + half)];
        const double a = lo, b = hi, c = cos[sz(n * half + i)], s = sin[sz(n * half + i)];
        lo = a * c - b * s;
        hi = b * c + a * s;
      }
}

void swiglu(Vec& h, const Vec& g, const Vec& u) {
  for (size_t i = 0; i < h.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
}

void attention(Vec& out, const Vec& q, const Vec& k, const Vec& v, const uint8_t* valid,
               const ops::AttentionShape& s) {
  const int64_t group = s.NH / s.NKV, HD = s.HD;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  Vec w(sz(s.past + s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t p = s.past + t, g = h / group;
        const size_t qo = sz(((b * s.T + t) * s.NH + h) * HD);
        const auto ko = [&](int64_t j) { return sz(((b * s.Smax + j) * s.NKV + g) * HD); };
        const auto vis = [&](int64_t j) { return valid == nullptr || valid[sz(b * s.Smax + j)] != 0; };
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          if (!vis(j)) continue;
          double d = 0;
          for (int64_t e = 0; e < HD; ++e) d += q[qo + sz(e)] * k[ko(j) + sz(e)];
          w[sz(j)] = d * scale;
          mx = std::max(mx, w[sz(j)]);
        }
        for (int64_t j = 0; j <= p; ++j)
          if (vis(j)) sum += (w[sz(j)] = std::exp(w[sz(j)] - mx));
        for (int64_t e = 0; e < HD; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j)
            if (vis(j)) acc += w[sz(j)] * v[ko(j) + sz(e)];
          out[qo + sz(e)] = sum > 0 ? acc / sum : 0.0;
        }
      }
}

double cross_entropy_sum(const Vec& logits, const std::vector<int64_t>& targets, int64_t V) {
  double total = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] < 0) continue;
    const double* z = logits.data() + n * sz(V);
    const double mx = *std::max_element(z, z + V);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - mx);
    total += mx + std::log(s) - z[targets[n]];
  }
  return total;
}
}  // namespace f64

// ---- central finite differences ----
struct FdResult {
  double worst = 0;  // max_i |g_i − fd_i| / (|g_i| + ‖g‖∞); the check is worst ≤ kFdTolerance
  size_t worst_index = 0;
};

// Perturbs x element by element (restoring it) and compares g with central differences of L.
FdResult finite_difference(Vec& x, const Vec& g, const std::function<double()>& L) {
  double g_inf = 0;
  for (double gi : g) g_inf = std::max(g_inf, std::fabs(gi));
  FdResult r;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = L();
    x[i] = x0 - kFdStep;
    const double lm = L();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * kFdStep);
    const double err = std::fabs(g[i] - fd) / (std::fabs(g[i]) + g_inf + 1e-300);
    if (err > r.worst) r = {err, i};
  }
  return r;
}

#define EXPECT_GRADIENT(x, g, L, what)                                                  \
  do {                                                                                  \
    const FdResult fd_ = finite_difference(x, g, L);                                   \
    EXPECT_LE(fd_.worst, kFdTolerance) << (what) << ": element " << fd_.worst_index;    \
  } while (0)

// =============================== RMSNorm ===============================

struct RmsNormProblem {
  int64_t N, C;
  double eps = 1e-5;
  Vec x, w, dy;
  RmsNormProblem(int64_t n, int64_t c, uint64_t seed)
      : N(n), C(c), x(to_double(random_vector(sz(n * c), seed, -3, 3))),
        w(to_double(random_vector(sz(c), seed + 1, 0.5f, 1.5f))),
        dy(to_double(random_vector(sz(n * c), seed + 2))) {}
  double objective() {
    Vec y(x.size()), r(sz(N));
    f64::rmsnorm(y, r, x, w, N, C, eps);
    return dot(dy, y);
  }
  // Analytic dx and dw (dw accumulated onto dw0).
  void gradients(Vec& dx, Vec& dw, const Vec& dw0) {
    Vec y(x.size()), r(sz(N));
    f64::rmsnorm(y, r, x, w, N, C, eps);
    dx.assign(x.size(), 0);
    dw = dw0;
    ops::ref::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
  }
};

TEST(ForwardF64, RmsNormMatchesProjectReference) {
  RmsNormProblem p(3, 7, 100);
  Vec y(p.x.size()), r(3);
  f64::rmsnorm(y, r, p.x, p.w, 3, 7, p.eps);
  auto xf = to_float(p.x), wf = to_float(p.w);
  std::vector<float> yf(xf.size()), rf(3);
  ops::ref::rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), 3, 7, static_cast<float>(p.eps));
  EXPECT_LE(nmse(to_float(y).data(), yf.data(), yf.size()), kElementwiseNmse);
}

// C = 1 is left out on purpose: there dx = r·w·dy·eps/(x² + eps) ~ 1e-5 of its two terms, a
// pure cancellation, so any relative metric measures rounding (FD noise ~1e-10 against a gradient
// ~1e-5), not the derivation. C = 2 is the smallest non-degenerate row.
TEST(RmsNormBackward, ReferenceMatchesFiniteDifferences) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{3, 7}, {1, 2}, {2, 16}}) {
    RmsNormProblem p(N, C, 101 + static_cast<uint64_t>(C));
    Vec dx, dw;
    p.gradients(dx, dw, Vec(sz(C), 0.0));
    const std::function<double()> L = [&] { return p.objective(); };
    EXPECT_GRADIENT(p.x, dx, L, "dx");
    EXPECT_GRADIENT(p.w, dw, L, "dw");
  }
}

TEST(RmsNormBackward, WeightGradientAccumulatesAndNullIsFrozen) {
  RmsNormProblem p(3, 7, 110);
  Vec dx, dw, dw_acc;
  p.gradients(dx, dw, Vec(7, 0.0));
  p.gradients(dx, dw_acc, Vec(7, 2.5));
  for (size_t c = 0; c < 7; ++c) EXPECT_DOUBLE_EQ(dw_acc[c], dw[c] + 2.5);
  // dw = null: dx unchanged.
  Vec y(p.x.size()), r(3), dx_frozen(p.x.size());
  f64::rmsnorm(y, r, p.x, p.w, 3, 7, p.eps);
  ops::ref::rmsnorm_backward<double>(dx_frozen.data(), nullptr, p.dy.data(), p.x.data(), p.w.data(), r.data(), 3, 7);
  EXPECT_EQ(dx_frozen, dx);
}

struct NormCase { int64_t N, C; };
std::ostream& operator<<(std::ostream& os, const NormCase& c) { return os << "N=" << c.N << " C=" << c.C; }
class RmsNormBackwardTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormBackwardTest, FastMatchesReference) {
  const auto [N, C] = GetParam();
  auto x = random_vector(sz(N * C), 120, -3, 3);
  auto w = random_vector(sz(C), 121, 0.5f, 1.5f);
  auto dy = random_vector(sz(N * C), 122);
  std::vector<float> y(x.size()), rstd(sz(N));
  ops::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  Guarded dx(x.size()), dx_ref(x.size()), dw(sz(C)), dw_ref(sz(C));
  std::fill(dw.data(), dw.data() + C, 0.5f);  // accumulates onto existing values
  std::fill(dw_ref.data(), dw_ref.data() + C, 0.5f);
  ops::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  ops::ref::rmsnorm_backward(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_TRUE(dx.intact() && dw.intact());
  EXPECT_FALSE(testing::any_nan(dx.data(), dx.size()) || testing::any_nan(dw.data(), dw.size()));
  EXPECT_LE(nmse(dx.data(), dx_ref.data(), dx.size()), kReductionNmse);
  EXPECT_LE(nmse(dw.data(), dw_ref.data(), dw.size()), kReductionNmse);
  // dx may alias dy, with dw requested: the same bits as the separate buffers.
  auto inplace = dy;
  std::vector<float> dw2(sz(C), 0.5f);
  ops::rmsnorm_backward(inplace.data(), dw2.data(), inplace.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_EQ(0, std::memcmp(inplace.data(), dx.data(), inplace.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dw2.data(), dw.data(), dw2.size() * sizeof(float)));
}
INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormBackwardTest,
                         ::testing::Values(NormCase{1, 2}, NormCase{3, 7}, NormCase{5, 576},
                                           NormCase{64, 576}, NormCase{17, 4096}, NormCase{2, 33}));
// (C = 1 left out: see ReferenceMatchesFiniteDifferences. In fp32 its dx is ~1e-5 of the terms
// that cancel, so fast and reference differ by ~1e-3 relative, which says nothing about either.)

// ================================ RoPE =================================

TEST(RopeBackward, ReferenceMatchesFiniteDifferences) {
  const int64_t N = 3, H = 2, HD = 6;
  // Random cos and sin, not a true rotation: this checks the transpose, not merely an inverse.
  auto x = to_double(random_vector(sz(N * H * HD), 130));
  const auto cos = to_double(random_vector(sz(N * HD / 2), 131));
  const auto sin = to_double(random_vector(sz(N * HD / 2), 132));
  const auto dy = to_double(random_vector(x.size(), 133));
  Vec dx = dy;
  ops::ref::rope_backward(dx.data(), cos.data(), sin.data(), N, H, HD);
  const std::function<double()> L = [&] {
    Vec y = x;
    f64::rope(y, cos, sin, N, H, HD);
    return dot(dy, y);
  };
  EXPECT_GRADIENT(x, dx, L, "dx");
}

TEST(RopeBackward, FastMatchesReferenceAndInvertsRotation) {
  for (auto [N, H, HD] : {std::tuple<int64_t, int64_t, int64_t>{5, 3, 10}, {64, 9, 64}, {1, 1, 2}}) {
    auto dy = random_vector(sz(N * H * HD), 134);
    auto cos = random_vector(sz(N * HD / 2), 135), sin = random_vector(sz(N * HD / 2), 136);
    auto fast = dy, ref = dy;
    ops::rope_backward(fast.data(), cos.data(), sin.data(), N, H, HD);
    ops::ref::rope_backward(ref.data(), cos.data(), sin.data(), N, H, HD);
    EXPECT_LE(nmse(fast.data(), ref.data(), fast.size()), kElementwiseNmse);
    // With true angles the backward is the inverse rotation: forward then backward is identity
    // up to a few fp32 roundings.
    for (size_t i = 0; i < cos.size(); ++i) {
      const double theta = 0.37 * static_cast<double>(i) + 1.1;
      cos[i] = static_cast<float>(std::cos(theta));
      sin[i] = static_cast<float>(std::sin(theta));
    }
    auto round_trip = dy;
    ops::rope_forward(round_trip.data(), cos.data(), sin.data(), N, H, HD);
    ops::rope_backward(round_trip.data(), cos.data(), sin.data(), N, H, HD);
    EXPECT_LE(nmse(round_trip.data(), dy.data(), dy.size()), kElementwiseNmse);
  }
}

// =============================== SwiGLU ================================

TEST(SwiGluBackward, ReferenceMatchesFiniteDifferences) {
  const size_t n = 9;
  auto g = to_double(random_vector(n, 140, -8, 8));
  g[0] = -1.2784645;  // near silu's minimum, where silu'(g) = 0
  auto u = to_double(random_vector(n, 141));
  const auto dh = to_double(random_vector(n, 142));
  Vec dg(n), du(n);
  ops::ref::swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), static_cast<int64_t>(n));
  const std::function<double()> L = [&] {
    Vec h(n);
    f64::swiglu(h, g, u);
    return dot(dh, h);
  };
  EXPECT_GRADIENT(g, dg, L, "dgate");
  EXPECT_GRADIENT(u, du, L, "dup");
}

TEST(SwiGluBackward, FastMatchesReferenceWithoutNaN) {
  const size_t n = 64 * 1536 + 3;  // SmolLM2's F, 64 tokens, and an odd tail
  auto g = random_vector(n, 143, -12, 12), u = random_vector(n, 144), dh = random_vector(n, 145);
  g[0] = -100;  // exp(100) overflows fp32: σ = 0, must not give inf·0
  g[1] = 100;
  g[2] = -1e30f;
  Guarded dg(n), du(n), dg_ref(n), du_ref(n);
  ops::swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), static_cast<int64_t>(n));
  ops::ref::swiglu_backward(dg_ref.data(), du_ref.data(), dh.data(), g.data(), u.data(), static_cast<int64_t>(n));
  EXPECT_TRUE(dg.intact() && du.intact());
  EXPECT_FALSE(testing::any_nan(dg.data(), n) || testing::any_nan(du.data(), n));
  EXPECT_LE(nmse(dg.data(), dg_ref.data(), n), kElementwiseNmse);
  EXPECT_LE(nmse(du.data(), du_ref.data(), n), kElementwiseNmse);
  // In place over the inputs (dgate = gate, dup = up): the same bits.
  auto g2 = g, u2 = u;
  ops::swiglu_backward(g2.data(), u2.data(), dh.data(), g2.data(), u2.data(), static_cast<int64_t>(n));
  EXPECT_EQ(0, std::memcmp(g2.data(), dg.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(u2.data(), du.data(), n * sizeof(float)));
}

// ============================== Attention ==============================

struct AttnCase { int64_t B, T, NH, NKV, HD; bool padding; };
std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV << " HD=" << c.HD
            << (c.padding ? " padded" : "");
}

// Padding used by the attention tests (Smax = T + 2, spare cache rows at the end):
//  - row 0: right padding, its last key is padding;
//  - row B-1 (if B > 1): left padding, keys 0 and 1 are padding, so queries 0 and 1 see no key;
//  - one padded key in the middle of row 0 when T >= 4.
std::vector<uint8_t> attention_mask(const AttnCase& c, int64_t Smax) {
  std::vector<uint8_t> valid(sz(c.B * Smax), 1);
  if (!c.padding) return valid;
  valid[sz(c.T - 1)] = 0;
  if (c.T >= 4) valid[2] = 0;
  if (c.B > 1)
    for (int64_t j = 0; j < std::min<int64_t>(2, c.T); ++j) valid[sz((c.B - 1) * Smax + j)] = 0;
  return valid;
}

TEST(ForwardF64, AttentionMatchesProjectReference) {
  const AttnCase c{2, 5, 4, 2, 6, true};
  const int64_t Smax = c.T + 2;
  ops::AttentionShape s{c.B, c.T, 0, Smax, c.NH, c.NKV, c.HD};
  auto q = random_vector(sz(c.B * c.T * c.NH * c.HD), 150, -2, 2);
  auto k = random_vector(sz(c.B * Smax * c.NKV * c.HD), 151, -2, 2);
  auto v = random_vector(k.size(), 152);
  const auto valid = attention_mask(c, Smax);
  Vec out(q.size());
  f64::attention(out, to_double(q), to_double(k), to_double(v), valid.data(), s);
  std::vector<float> out_ref(q.size());
  ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(), valid.data(), s);
  EXPECT_LE(nmse(to_float(out).data(), out_ref.data(), out.size()), kElementwiseNmse);
}

class AttentionBackwardFd : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionBackwardFd, ReferenceMatchesFiniteDifferences) {
  const AttnCase c = GetParam();
  const int64_t Smax = c.T + 2;
  ops::AttentionShape s{c.B, c.T, 0, Smax, c.NH, c.NKV, c.HD};
  auto q = to_double(random_vector(sz(c.B * c.T * c.NH * c.HD), 160, -2, 2));
  auto k = to_double(random_vector(sz(c.B * Smax * c.NKV * c.HD), 161, -2, 2));
  auto v = to_double(random_vector(k.size(), 162));
  const auto dout = to_double(random_vector(q.size(), 163));
  const auto valid = attention_mask(c, Smax);
  Vec dq(q.size()), dk(k.size()), dv(v.size());
  ops::ref::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), valid.data(), s);
  const std::function<double()> L = [&] {
    Vec out(q.size());
    f64::attention(out, q, k, v, valid.data(), s);
    return dot(dout, out);
  };
  EXPECT_GRADIENT(q, dq, L, "dq");
  EXPECT_GRADIENT(k, dk, L, "dk");
  EXPECT_GRADIENT(v, dv, L, "dv");
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackwardFd,
                         ::testing::Values(AttnCase{2, 5, 4, 2, 6, true},    // GQA + padding
                                           AttnCase{2, 5, 3, 3, 6, true},    // MHA + padding
                                           AttnCase{1, 4, 3, 1, 4, false},   // MQA
                                           AttnCase{1, 1, 1, 1, 2, false})); // one token

class AttentionBackwardTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionBackwardTest, FastMatchesReference) {
  const AttnCase c = GetParam();
  const int64_t Smax = c.T + 2;  // spare cache rows must get zero gradient
  ops::AttentionShape s{c.B, c.T, 0, Smax, c.NH, c.NKV, c.HD};
  auto q = random_vector(sz(c.B * c.T * c.NH * c.HD), 170, -2, 2);
  auto k = random_vector(sz(c.B * Smax * c.NKV * c.HD), 171, -2, 2);
  auto v = random_vector(k.size(), 172);
  auto dout = random_vector(q.size(), 173);
  const auto valid = attention_mask(c, Smax);
  Guarded dq(q.size()), dk(k.size()), dv(v.size());
  Guarded dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), valid.data(), s);
  ops::ref::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(),
                               k.data(), v.data(), valid.data(), s);
  EXPECT_TRUE(dq.intact() && dk.intact() && dv.intact());
  for (const Guarded* g : {&dq, &dk, &dv}) EXPECT_FALSE(testing::any_nan(g->data(), g->size()));
  EXPECT_LE(nmse(dq.data(), dq_ref.data(), dq.size()), kReductionNmse);
  EXPECT_LE(nmse(dk.data(), dk_ref.data(), dk.size()), kReductionNmse);
  EXPECT_LE(nmse(dv.data(), dv_ref.data(), dv.size()), kReductionNmse);
  // Deterministic: a second run gives the same bits.
  Guarded dq2(q.size()), dk2(k.size()), dv2(v.size());
  ops::attention_backward(dq2.data(), dk2.data(), dv2.data(), dout.data(), q.data(), k.data(),
                          v.data(), valid.data(), s);
  EXPECT_EQ(0, std::memcmp(dq2.data(), dq.data(), dq.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dk2.data(), dk.data(), dk.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dv2.data(), dv.data(), dv.size() * sizeof(float)));
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackwardTest,
                         ::testing::Values(AttnCase{1, 1, 1, 1, 2, false},
                                           AttnCase{2, 7, 4, 2, 8, true},
                                           AttnCase{2, 64, 9, 3, 64, true},   // SmolLM2 heads
                                           AttnCase{2, 5, 6, 6, 12, true},    // MHA
                                           AttnCase{1, 33, 8, 1, 16, false},  // MQA
                                           AttnCase{3, 17, 4, 4, 6, true},
                                           // Longer than one query tile (64): dK, dV summed over tiles
                                           AttnCase{2, 150, 6, 2, 16, true},
                                           AttnCase{1, 129, 3, 3, 8, false}));   // MHA, 1-row last tile

TEST(AttentionBackward, PaddingAndSpareRowsGetExactlyZeroGradient) {
  const AttnCase c{2, 6, 4, 2, 8, true};
  const int64_t Smax = c.T + 2;
  ops::AttentionShape s{c.B, c.T, 0, Smax, c.NH, c.NKV, c.HD};
  auto q = random_vector(sz(c.B * c.T * c.NH * c.HD), 180, -2, 2);
  auto k = random_vector(sz(c.B * Smax * c.NKV * c.HD), 181, -2, 2);
  auto v = random_vector(k.size(), 182);
  auto dout = random_vector(q.size(), 183);
  const auto valid = attention_mask(c, Smax);
  // Start from garbage: every element must be overwritten.
  std::vector<float> dq(q.size(), 7.0f), dk(k.size(), 7.0f), dv(v.size(), 7.0f);
  std::vector<float> dq_ref(q.size(), 7.0f), dk_ref(k.size(), 7.0f), dv_ref(v.size(), 7.0f);
  ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                          valid.data(), s);
  ops::ref::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(),
                               k.data(), v.data(), valid.data(), s);
  const int64_t kv_row = c.NKV * c.HD, q_row = c.NH * c.HD;
  int64_t zero_rows = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t j = 0; j < Smax; ++j) {
      const bool dead = j >= c.T || valid[sz(b * Smax + j)] == 0;
      if (!dead) continue;
      ++zero_rows;
      for (int64_t e = 0; e < kv_row; ++e) {
        const size_t i = sz((b * Smax + j) * kv_row + e);
        EXPECT_EQ(dk[i], 0.0f) << "b " << b << " key " << j;
        EXPECT_EQ(dv[i], 0.0f) << "b " << b << " key " << j;
        EXPECT_EQ(dk_ref[i], 0.0f) << "b " << b << " key " << j;
        EXPECT_EQ(dv_ref[i], 0.0f) << "b " << b << " key " << j;
      }
    }
  EXPECT_EQ(zero_rows, 2 * 2 + 2 + 2);  // spare rows, row 0's keys 2 and 5, row 1's keys 0 and 1
  // Row 1's queries 0 and 1 see no key (output zeros in the forward): zero dq.
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t e = 0; e < q_row; ++e) {
      EXPECT_EQ(dq[sz((1 * c.T + t) * q_row + e)], 0.0f);
      EXPECT_EQ(dq_ref[sz((1 * c.T + t) * q_row + e)], 0.0f);
    }
  // ...while a live query's gradient is not zero (the test can fail). Query 3 of row 1 sees keys
  // 2 and 3; query 2 sees key 2 alone, and a softmax over one key has zero gradient (P = 1, dS = 0).
  EXPECT_NE(dq[sz((1 * c.T + 3) * q_row)], 0.0f);
  EXPECT_EQ(dq[sz((1 * c.T + 2) * q_row)], 0.0f);
}

TEST(AttentionBackward, RejectsKvHistory) {
  ops::AttentionShape s{1, 2, 1, 4, 1, 1, 2};
  std::vector<float> buf(64, 0.0f);
  EXPECT_THROW(ops::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                       buf.data(), buf.data(), nullptr, s),
               Internal);
  EXPECT_THROW(ops::ref::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(),
                                            buf.data(), buf.data(), buf.data(), nullptr, s),
               Internal);
}

// ============================ Cross-entropy ============================

TEST(ForwardF64, CrossEntropyMatchesProjectLoss) {
  auto z = random_vector(4 * 7, 190, -3, 3);
  const std::vector<int64_t> targets{3, -100, 0, 6};
  const auto r = ops::cross_entropy_sum(z.data(), targets.data(), 4, 7);
  EXPECT_NEAR(f64::cross_entropy_sum(to_double(z), targets, 7), r.sum, 1e-12 * std::fabs(r.sum));
}

TEST(CrossEntropyBackward, ReferenceMatchesFiniteDifferences) {
  const int64_t N = 4, V = 7;
  auto z = to_double(random_vector(sz(N * V), 191, -3, 3));
  const std::vector<int64_t> targets{3, -100, 0, 6};
  const double scale = 1.0 / 3.0;  // 1 / (number of counted targets)
  Vec dz(z.size(), 9.0);           // garbage: every element is overwritten
  ops::ref::cross_entropy_backward(dz.data(), z.data(), targets.data(), N, V, scale);
  const std::function<double()> L = [&] { return scale * f64::cross_entropy_sum(z, targets, V); };
  EXPECT_GRADIENT(z, dz, L, "dlogits");
  for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dz[sz(V + v)], 0.0);  // ignored row
}

// The fused loss + gradient of training's loss head: the same gradient bits as
// cross_entropy_backward, and the loss of cross_entropy_sum within the fp32 rounding of
// logit - max (~1e-6 per row at |logits| <= 8; see backward.h).
TEST(CrossEntropyBackward, FusedLossMatchesSumAndGradient) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{4, 7}, {8, 49152}, {3, 32000}}) {
    auto z = random_vector(sz(N * V), 193, -8, 8);
    std::vector<int64_t> targets(sz(N));
    for (int64_t n = 0; n < N; ++n) targets[sz(n)] = n == 1 ? -100 : (n * 7919 + 13) % V;
    const float scale = 1.0f / static_cast<float>(N - 1);
    const auto expected = ops::cross_entropy_sum(z.data(), targets.data(), N, V);
    Guarded dz(z.size()), dz_plain(z.size());
    ops::cross_entropy_backward(dz_plain.data(), z.data(), targets.data(), N, V, scale);
    auto inplace = z;  // as the loss head calls it: over the logits
    const auto got = ops::cross_entropy_loss_backward(inplace.data(), inplace.data(), targets.data(), N, V, scale);
    EXPECT_EQ(got.count, expected.count);
    EXPECT_NEAR(got.sum, expected.sum, 1e-6 * static_cast<double>(expected.count)) << N << "x" << V;
    EXPECT_EQ(0, std::memcmp(inplace.data(), dz_plain.data(), inplace.size() * sizeof(float)));
  }
}

TEST(CrossEntropyBackward, FastMatchesReference) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{4, 7}, {8, 49152}, {3, 32000}}) {
    auto z = random_vector(sz(N * V), 192, -8, 8);
    std::vector<int64_t> targets(sz(N));
    for (int64_t n = 0; n < N; ++n) targets[sz(n)] = n == 1 ? -100 : (n * 7919 + 13) % V;
    const float scale = 1.0f / static_cast<float>(N - 1);
    Guarded dz(z.size()), dz_ref(z.size());
    ops::cross_entropy_backward(dz.data(), z.data(), targets.data(), N, V, scale);
    ops::ref::cross_entropy_backward(dz_ref.data(), z.data(), targets.data(), N, V, scale);
    EXPECT_TRUE(dz.intact());
    EXPECT_FALSE(testing::any_nan(dz.data(), dz.size()));
    EXPECT_LE(nmse(dz.data(), dz_ref.data(), dz.size()), kReductionNmse) << N << "x" << V;
    for (int64_t v = 0; v < V; ++v) ASSERT_EQ(dz.data()[V + v], 0.0f);  // ignored row 1
    // Each counted row sums to zero (softmax sums to 1). Each element carries ~2^-24 relative
    // error and the probabilities sum to 1, so |Σ| ~ a few 2^-24·scale; 1e-6·scale has margin.
    double row_sum = 0;
    for (int64_t v = 0; v < V; ++v) row_sum += static_cast<double>(dz.data()[v]);
    EXPECT_NEAR(row_sum, 0.0, static_cast<double>(scale) * 1e-6);
    // In place over the logits: the same bits.
    auto inplace = z;
    ops::cross_entropy_backward(inplace.data(), inplace.data(), targets.data(), N, V, scale);
    EXPECT_EQ(0, std::memcmp(inplace.data(), dz.data(), inplace.size() * sizeof(float)));
  }
}

// ======================== the check itself can fail ========================

TEST(GradientCheck, CatchesSmallErrors) {
  RmsNormProblem p(3, 7, 200);
  Vec dx, dw;
  p.gradients(dx, dw, Vec(7, 0.0));
  const std::function<double()> L = [&] { return p.objective(); };
  EXPECT_LE(finite_difference(p.x, dx, L).worst, kFdTolerance);
  // Sensitivity: element i fails when its error exceeds 1e-6·(|g_i| + ‖g‖∞) ≤ 2e-6·‖g‖∞. An error
  // of 3e-6·‖g‖∞ on the element with the smallest gradient (the hardest to catch) is caught...
  double g_inf = 0;
  size_t smallest = 0;
  for (size_t i = 0; i < dx.size(); ++i) {
    g_inf = std::max(g_inf, std::fabs(dx[i]));
    if (std::fabs(dx[i]) < std::fabs(dx[smallest])) smallest = i;
  }
  Vec off = dx;
  off[smallest] += 3e-6 * g_inf;
  EXPECT_GT(finite_difference(p.x, off, L).worst, kFdTolerance);
  // ...and so is the classic mistake of treating rstd as a constant (dx = r·w⊙dy).
  Vec y(p.x.size()), r(3), naive(p.x.size());
  f64::rmsnorm(y, r, p.x, p.w, 3, 7, p.eps);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 7; ++c) naive[sz(n * 7 + c)] = r[sz(n)] * p.w[sz(c)] * p.dy[sz(n * 7 + c)];
  EXPECT_GT(finite_difference(p.x, naive, L).worst, 1e-3);
}

}  // namespace
}  // namespace medtune
