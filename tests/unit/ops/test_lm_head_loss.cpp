// ops::lm_head_loss_backward_bf16 (training's loss head at bf16 over vocabulary tiles), both
// kernels, against a double-precision loss head of the bf16-rounded operands, and the three-call
// sequence it replaces (linear_forward_bf16, cross_entropy_loss_backward,
// linear_backward_input_bf16) against the same bound.
//
// Tolerance, derived per element of dh_n = scale·(Σ_v p_v·W_v − W_y), p = softmax(h·Wᵀ):
//  - each logit is an fp32 sum of C exact products: |Δz_v| <= γ(C)·Σ_c |h_c·W_vc| =: ε_v
//    (test_linear_bf16.cpp), so each exp and the normalising sum move by <= ~2·max ε relatively;
//  - each probability-like operand of the second product is rounded to bf16 once: relative 2^-8
//    (8 significant bits, round to nearest); the fp32 exp adds <= 2 ulp (vec_exp.h), the
//    rescaling where a row's max grows one fp32 rounding per tile (2^-24 each);
//  - the second product sums V exact products in fp32: γ(V) relative to Σ_v p_v·|W_vc|;
//  - the three-call sequence also rounds the target's (p_y − 1)·scale to bf16: 2^-8·scale·|W_yc|.
// Hence |dh − ref| <= scale·(2^-8 + γ(V) + 4·max ε + 2^-20)·(Σ_v p_v·|W_vc| + |W_yc|). Mutations
// that break it: the accumulator not rescaled where a row's max grows, the target's −scale·W_y
// left out (both fail every kernel). The loss: |Δ loss_n| <= 4·max ε + 2^-20 per row (its logits'
// error three times and the fp32 exps; the sum is in double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "core/half.h"
#include "ops/backward.h"
#include "ops/linear.h"
#include "ops/lm_head_loss.h"
#include "support/buffers.h"

namespace medtune::ops {
namespace {

double gamma(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
}

float bf16_round(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

std::vector<Bf16Kernel> kernels_here() {
  std::vector<Bf16Kernel> k{Bf16Kernel::kWidenedSgemm};
  if (bf16_kernel() == Bf16Kernel::kOneDnn) k.push_back(Bf16Kernel::kOneDnn);
  return k;
}

// A loss head of n rows over a vocabulary of V words of C dims, with its double reference.
struct Head {
  int64_t n, V, C;
  float scale;
  std::vector<float> h, w;          // (n, C), (V, C) fp32
  std::vector<uint16_t> w_bf16;     // (V, C): what model::keep_bf16_copies would keep
  std::vector<int64_t> targets;     // (n), some < 0
  std::vector<double> ref_dh, tol;  // (n, C)
  double ref_loss = 0, loss_tol = 0;
  int64_t count = 0;

  StoredMatrix matrix(bool with_copy) const {
    StoredMatrix m{DType::F32, V, C, reinterpret_cast<const uint8_t*>(w.data())};
    if (with_copy) m.bf16 = w_bf16.data();
    return m;
  }
};

Head make_head(int64_t n, int64_t V, int64_t C, uint64_t seed) {
  Head x{n,
         V,
         C,
         0.37f,
         testing::random_normal(static_cast<size_t>(n * C), seed),
         testing::random_normal(static_cast<size_t>(V * C), seed + 1),
         {},
         {},
         {},
         {}};
  for (float& v : x.w) v *= 0.3f;  // logits of a few units: maxima spread over the tiles
  for (float v : x.w) x.w_bf16.push_back(f32_to_bf16(v));
  for (int64_t i = 0; i < n; ++i) x.targets.push_back(i % 7 == 3 ? -100 : (i * 7919) % V);
  // The reference, in double from the rounded operands.
  std::vector<double> hr(x.h.size()), wr(x.w.size());
  for (size_t i = 0; i < hr.size(); ++i) hr[i] = bf16_round(x.h[i]);
  for (size_t i = 0; i < wr.size(); ++i) wr[i] = bf16_round(x.w[i]);
  const double u8 = std::ldexp(1.0, -8), gV = gamma(V);
  x.ref_dh.assign(static_cast<size_t>(n * C), 0.0);
  x.tol.assign(static_cast<size_t>(n * C), 0.0);
  std::vector<double> z(static_cast<size_t>(V));  // a row's logits, then its softmax
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = x.targets[static_cast<size_t>(i)];
    double eps = 0;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0, a = 0;
      for (int64_t c = 0; c < C; ++c) {
        s += hr[static_cast<size_t>(i * C + c)] * wr[static_cast<size_t>(v * C + c)];
        a += std::fabs(hr[static_cast<size_t>(i * C + c)] * wr[static_cast<size_t>(v * C + c)]);
      }
      z[static_cast<size_t>(v)] = s;
      eps = std::max(eps, gamma(C) * a);
    }
    if (y < 0) continue;  // dh row 0, no loss: tolerance 0
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double zv : z) sum += std::exp(zv - mx);
    x.ref_loss += mx + std::log(sum) - z[static_cast<size_t>(y)];
    x.loss_tol += 4 * eps + std::ldexp(1.0, -20);
    x.count += 1;
    const double u = u8 + gV + 4 * eps + std::ldexp(1.0, -20);
    for (int64_t v = 0; v < V; ++v)
      z[static_cast<size_t>(v)] = std::exp(z[static_cast<size_t>(v)] - mx) / sum;
    for (int64_t c = 0; c < C; ++c) {
      double g = 0, bound = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double p = z[static_cast<size_t>(v)];  // softmax
        g += p * wr[static_cast<size_t>(v * C + c)];
        bound += p * std::fabs(wr[static_cast<size_t>(v * C + c)]);
      }
      const double wy = wr[static_cast<size_t>(y * C + c)];
      x.ref_dh[static_cast<size_t>(i * C + c)] = static_cast<double>(x.scale) * (g - wy);
      x.tol[static_cast<size_t>(i * C + c)] =
          static_cast<double>(x.scale) * u * (bound + std::fabs(wy));
    }
  }
  return x;
}

// Worst |got - ref| / tol over dh (<= 1 passes), and the loss check.
void expect_within(const Head& x, const std::vector<float>& dh, const LossSum& loss,
                   const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < dh.size(); ++i) {
    const double err = std::fabs(static_cast<double>(dh[i]) - x.ref_dh[i]);
    worst = std::max(worst, x.tol[i] > 0 ? err / x.tol[i] : (err > 0 ? HUGE_VAL : 0.0));
  }
  EXPECT_LE(worst, 1.0) << what << ": dh beyond the derived bound";
  std::cout << "[ bound    ] " << what << ": worst |dh - ref| / bound = " << worst << "\n";
  EXPECT_EQ(loss.count, x.count) << what;
  EXPECT_NEAR(loss.sum, x.ref_loss, x.loss_tol) << what;
}

TEST(LmHeadLossBf16, WithinTheDerivedBoundOverSeveralTiles) {
  // 255 rows take tiles of 2048 words: 5000 words are three tiles, the last one partial, and
  // most rows' maxima are past the first tile (the rescaling is exercised).
  const Head x = make_head(255, 5000, 64, 41);
  for (Bf16Kernel k : kernels_here())
    for (bool copy : {false, true}) {
      std::vector<float> dh(static_cast<size_t>(x.n * x.C), NAN);
      const LossSum loss = lm_head_loss_backward_bf16(dh.data(), x.h.data(), x.matrix(copy),
                                                      x.targets.data(), x.n, x.scale, k);
      expect_within(x, dh, loss,
                    std::string(bf16_kernel_name(k)) + (copy ? ", kept bf16 copy" : ""));
    }
}

TEST(LmHeadLossBf16, TheThreeCallSequenceMeetsTheSameBound) {
  // What the fused op replaces, checked against the same reference and bound: the bound is the
  // one the existing bf16 path meets, not one cut to fit the new op.
  const Head x = make_head(255, 5000, 64, 41);
  for (Bf16Kernel k : kernels_here()) {
    std::vector<float> logits(static_cast<size_t>(x.n * x.V)), dh(static_cast<size_t>(x.n * x.C));
    linear_forward_bf16(logits.data(), x.h.data(), x.matrix(false), nullptr, x.n, k);
    const LossSum loss = cross_entropy_loss_backward(logits.data(), logits.data(), x.targets.data(),
                                                     x.n, x.V, x.scale);
    linear_backward_input_bf16(dh.data(), logits.data(), x.matrix(false), x.n, false, k);
    expect_within(x, dh, loss, std::string("three calls, ") + bf16_kernel_name(k));
  }
}

TEST(LmHeadLossBf16, OneTileAndFewRows) {
  // 4 rows take one tile of the whole vocabulary (no rescaling); row 3 has no target.
  const Head x = make_head(4, 300, 40, 7);
  for (Bf16Kernel k : kernels_here()) {
    std::vector<float> dh(static_cast<size_t>(x.n * x.C), NAN);
    const LossSum loss = lm_head_loss_backward_bf16(dh.data(), x.h.data(), x.matrix(false),
                                                    x.targets.data(), x.n, x.scale, k);
    expect_within(x, dh, loss, bf16_kernel_name(k));
  }
}

}  // namespace
}  // namespace medtune::ops
