// ops::attention_forward_bf16 and attention_backward_bf16, both kernels (the widened SGEMM
// everywhere, oneDNN where the CPU has native bf16), against a double-precision attention of the
// bf16-rounded q, k, v and dO, with masks, packing, GQA and MHA, a key history, several query
// tiles.
//
// Tolerance, derived per element (u = 2^-24, γ(n) = n·u / (1 − n·u), X̃ = X rounded to bf16):
//  - a score S_tj = scale·Σ_d q̃_td·k̃_jd is an fp32 sum of exact products, then scaled:
//    |ΔS_tj| <= (γ(HD) + u)·scale·Σ_d |q̃_td·k̃_jd|; E_t = its max over the keys t sees;
//  - softmax moves each P_tj by <= ρ_t = 2·E_t + 2^-20 relatively (the exps see ΔS, the sum
//    averages it; 2^-20 covers the fp32 exps' few ulp, vec_exp.h, and the normalisation);
//  - P and dS are rounded to bf16 once before their products: relative 2^-8 (8 significant bits,
//    round to nearest), so P̃ is within π_t = ρ_t + 2^-8 + ρ_t·2^-8 of the reference P;
//  - O = P̃·Ṽ and dV = P̃ᵀ·dÕ are fp32 sums of at most T (dV: T per head and the group's sum):
//    |ΔO_td| <= (π_t + γ(T)(1 + π_t))·Σ_j P_tj·|ṽ_jd|, and likewise for dV;
//  - dP_tj = Σ_d dÕ_td·ṽ_jd: |ΔdP_tj| <= δ_tj = γ(HD)·Σ_d |dÕ_td·ṽ_jd|; D_t = Σ_j P_tj·dP_tj in
//    double from the kernel's P and dP: |ΔD_t| <= Δ_t = Σ_j P_tj·(δ_tj + ρ_t·(|dP_tj| + δ_tj)) +
//    u·|D_t|;
//  - dS_tj = P_tj·(dP_tj − D_t)·scale (three fp32 roundings), then rounded to bf16:
//    |ΔdS_tj| <= σ_tj = a + 2^-8·(|dS_tj| + a), a = scale·P_tj·(ρ_t·|dP_tj − D_t| + (1 + ρ_t)·(δ_tj
//    + Δ_t)) + 3u·|dS_tj|;
//  - dQ = dS̃·K̃ and dK = dS̃ᵀ·Q̃ (summed over the group): Σ σ·|k̃| (resp. |q̃|) plus γ of the sum's
//    length times Σ (|dS| + σ)·|k̃|.
// A bound of 1 passes. Mutations that break it: D left out, and the last query tile adding its
// dK/dV to the buffers instead of writing them (both tried, session 56); also, by the bound's
// size, the scale left out, a wrong kv head for a query head, the mask ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "ops/attention_bf16.h"
#include "ops/backward.h"
#include "support/buffers.h"

namespace medtune::ops {
namespace {

constexpr double kU = 0x1p-24;

double gamma(int64_t n) {
  return static_cast<double>(n) * kU / (1.0 - static_cast<double>(n) * kU);
}

double rounded(float v) {
  return static_cast<double>(bf16_to_f32(f32_to_bf16(v)));
}

std::vector<Bf16Kernel> kernels_here() {
  std::vector<Bf16Kernel> k{Bf16Kernel::kWidenedSgemm};
  if (bf16_kernel() == Bf16Kernel::kOneDnn) k.push_back(Bf16Kernel::kOneDnn);
  return k;
}

struct Case {
  std::string name;
  AttentionShape s;
  bool padded = false;  // row 1 left-padded by 3 keys
  bool packed = false;  // row 0 holds examples of 5, 40 and the rest (past must be 0)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// Inputs, and the reference values and bounds of every output.
struct Problem {
  Case c;
  std::vector<float> q, k, v, dout;  // (B, T, NH, HD), (B, Smax, NKV, HD) x2, (B, T, NH, HD)
  std::vector<uint8_t> valid;        // (B, Smax) or empty
  std::vector<int64_t> seg;          // (B, T) or empty
  std::vector<double> o, o_tol, dq, dq_tol, dk, dk_tol, dv, dv_tol;

  const uint8_t* key_valid() const { return valid.empty() ? nullptr : valid.data(); }
  const int64_t* seg_start() const { return seg.empty() ? nullptr : seg.data(); }
  // Whether key position j (absolute) is visible to the query at row t of batch row b.
  bool visible(int64_t b, int64_t t, int64_t j) const {
    const AttentionShape& s = c.s;
    const int64_t p = s.past + t, lo = seg.empty() ? 0 : seg[static_cast<size_t>(b * s.T + t)];
    return j >= lo && j <= p && (valid.empty() || valid[static_cast<size_t>(b * s.Smax + j)] != 0);
  }
};

Problem make_problem(const Case& c, uint64_t seed) {
  const AttentionShape& s = c.s;
  Problem x;
  x.c = c;
  const int64_t qd = s.NH * s.HD, kvd = s.NKV * s.HD;
  x.q = testing::random_normal(static_cast<size_t>(s.B * s.T * qd), seed);
  x.k = testing::random_normal(static_cast<size_t>(s.B * s.Smax * kvd), seed + 1);
  x.v = testing::random_normal(static_cast<size_t>(s.B * s.Smax * kvd), seed + 2);
  x.dout = testing::random_normal(static_cast<size_t>(s.B * s.T * qd), seed + 3);
  if (c.padded) {
    x.valid.assign(static_cast<size_t>(s.B * s.Smax), 1);
    for (int64_t j = 0; j < 3; ++j) x.valid[static_cast<size_t>(1 * s.Smax + j)] = 0;
  }
  if (c.packed) {
    x.seg.resize(static_cast<size_t>(s.B * s.T));
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t)
        x.seg[static_cast<size_t>(b * s.T + t)] = b != 0 ? 0 : t < 5 ? 0 : t < 45 ? 5 : 45;
  }
  auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t d) {
    return rounded(x.q[static_cast<size_t>((b * s.T + t) * qd + h * s.HD + d)]);
  };
  auto K = [&](int64_t b, int64_t j, int64_t g, int64_t d) {
    return rounded(x.k[static_cast<size_t>((b * s.Smax + j) * kvd + g * s.HD + d)]);
  };
  auto V = [&](int64_t b, int64_t j, int64_t g, int64_t d) {
    return rounded(x.v[static_cast<size_t>((b * s.Smax + j) * kvd + g * s.HD + d)]);
  };
  auto dO = [&](int64_t b, int64_t t, int64_t h, int64_t d) {
    return rounded(x.dout[static_cast<size_t>((b * s.T + t) * qd + h * s.HD + d)]);
  };
  x.o.assign(x.q.size(), 0.0);
  x.o_tol = x.dq = x.dq_tol = x.o;
  x.dk.assign(x.k.size(), 0.0);
  x.dk_tol = x.dv = x.dv_tol = x.dk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD)), u8 = 0x1p-8;
  const int64_t L = s.past + s.T, group = s.NH / s.NKV;
  // Per-head terms of dK and dV's bounds are summed over the group: γ of the longer sum.
  const double g_kv = gamma(s.T * group), g_q = gamma(L);
  std::vector<double> P(static_cast<size_t>(L)), dP(P.size()), delta(P.size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t g = h / group;
        // Scores, their bound, softmax.
        double mx = -HUGE_VAL, E = 0;
        for (int64_t j = 0; j < L; ++j) {
          if (!x.visible(b, t, j)) continue;
          double sum = 0, mag = 0;
          for (int64_t d = 0; d < s.HD; ++d) {
            sum += Q(b, t, h, d) * K(b, j, g, d);
            mag += std::fabs(Q(b, t, h, d) * K(b, j, g, d));
          }
          P[static_cast<size_t>(j)] = scale * sum;
          E = std::max(E, (gamma(s.HD) + kU) * scale * mag);
          mx = std::max(mx, scale * sum);
        }
        if (mx == -HUGE_VAL) continue;  // no visible key: zero output and gradients, bound 0
        double Z = 0;
        for (int64_t j = 0; j < L; ++j)
          if (x.visible(b, t, j)) Z += std::exp(P[static_cast<size_t>(j)] - mx);
        for (int64_t j = 0; j < L; ++j)
          P[static_cast<size_t>(j)] =
              x.visible(b, t, j) ? std::exp(P[static_cast<size_t>(j)] - mx) / Z : 0.0;
        const double rho = 2 * E + 0x1p-20, pi = rho + u8 + rho * u8;
        const size_t orow = static_cast<size_t>((b * s.T + t) * qd + h * s.HD);
        for (int64_t d = 0; d < s.HD; ++d) {
          double o = 0, mag = 0;
          for (int64_t j = 0; j < L; ++j) {
            o += P[static_cast<size_t>(j)] * V(b, j, g, d);
            mag += P[static_cast<size_t>(j)] * std::fabs(V(b, j, g, d));
          }
          x.o[orow + static_cast<size_t>(d)] = o;
          x.o_tol[orow + static_cast<size_t>(d)] = (pi + g_q * (1 + pi)) * mag;
        }
        if (s.past != 0) continue;  // the backward is for training only
        // dP, D, dS and their bounds; then dQ, dK, dV.
        double D = 0, Dbound = 0;
        for (int64_t j = 0; j < L; ++j) {
          double sum = 0, mag = 0;
          for (int64_t d = 0; d < s.HD; ++d) {
            sum += dO(b, t, h, d) * V(b, j, g, d);
            mag += std::fabs(dO(b, t, h, d) * V(b, j, g, d));
          }
          dP[static_cast<size_t>(j)] = sum;
          delta[static_cast<size_t>(j)] = gamma(s.HD) * mag;
          const double p = P[static_cast<size_t>(j)];
          D += p * sum;
          Dbound += p * (delta[static_cast<size_t>(j)] +
                         rho * (std::fabs(sum) + delta[static_cast<size_t>(j)]));
        }
        Dbound += kU * std::fabs(D);
        for (int64_t j = 0; j < L; ++j) {
          const double p = P[static_cast<size_t>(j)];
          if (p == 0) continue;
          const double ds = p * (dP[static_cast<size_t>(j)] - D) * scale;
          const double a = scale * p *
                               (rho * std::fabs(dP[static_cast<size_t>(j)] - D) +
                                (1 + rho) * (delta[static_cast<size_t>(j)] + Dbound)) +
                           3 * kU * std::fabs(ds);
          const double sigma = a + u8 * (std::fabs(ds) + a);
          const size_t krow = static_cast<size_t>((b * s.Smax + j) * kvd + g * s.HD);
          for (int64_t d = 0; d < s.HD; ++d) {
            const size_t qi = orow + static_cast<size_t>(d), ki = krow + static_cast<size_t>(d);
            x.dq[qi] += ds * K(b, j, g, d);
            x.dq_tol[qi] += sigma * std::fabs(K(b, j, g, d)) +
                            g_q * (std::fabs(ds) + sigma) * std::fabs(K(b, j, g, d));
            x.dk[ki] += ds * Q(b, t, h, d);
            x.dk_tol[ki] += sigma * std::fabs(Q(b, t, h, d)) +
                            g_kv * (std::fabs(ds) + sigma) * std::fabs(Q(b, t, h, d));
            x.dv[ki] += p * dO(b, t, h, d);
            x.dv_tol[ki] += (pi + g_kv * (1 + pi)) * p * std::fabs(dO(b, t, h, d));
          }
        }
      }
  return x;
}

// Worst |got − ref| / bound over an output (<= 1 passes; an element with bound 0 must be exact).
double worst(const std::vector<float>& got, const std::vector<double>& ref,
             const std::vector<double>& tol) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    w = std::max(w, tol[i] > 0 ? err / tol[i] : (err > 0 ? HUGE_VAL : 0.0));
  }
  return w;
}

const char* kernel_label(Bf16Kernel k) {
  return k == Bf16Kernel::kOneDnn ? "onednn" : "widened-sgemm";
}

class AttentionBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionBf16, ForwardAndBackwardWithinTheDerivedBounds) {
  const Problem x = make_problem(GetParam(), 7);
  const AttentionShape& s = x.c.s;
  for (Bf16Kernel kernel : kernels_here()) {
    const std::string what = x.c.name + " (" + kernel_label(kernel) + ")";
    std::vector<float> o(x.q.size(), -7.0f);
    attention_forward_bf16(o.data(), x.q.data(), x.k.data(), x.v.data(), x.key_valid(),
                           x.seg_start(), s, kernel);
    const double wo = worst(o, x.o, x.o_tol);
    EXPECT_LE(wo, 1.0) << what << ": output beyond the derived bound";
    std::cout << "[ bound    ] " << what << ": worst |err| / bound: out " << wo;
    if (s.past != 0) {
      std::cout << "\n";
      continue;
    }
    // Garbage in every output: each element must be written (rows [T, Smax) of dk, dv with zeros).
    // Twice, checking the second: it finds the per-thread scratch holding the first call's terms.
    std::vector<float> dq(x.q.size()), dk(x.k.size()), dv(x.v.size());
    for (int call = 0; call < 2; ++call) {
      std::fill(dq.begin(), dq.end(), -7.0f);
      std::fill(dk.begin(), dk.end(), -7.0f);
      std::fill(dv.begin(), dv.end(), -7.0f);
      attention_backward_bf16(dq.data(), dk.data(), dv.data(), x.dout.data(), x.q.data(),
                              x.k.data(), x.v.data(), x.key_valid(), x.seg_start(), s, kernel);
    }
    const double wq = worst(dq, x.dq, x.dq_tol), wk = worst(dk, x.dk, x.dk_tol),
                 wv = worst(dv, x.dv, x.dv_tol);
    EXPECT_LE(wq, 1.0) << what << ": dq beyond the derived bound";
    EXPECT_LE(wk, 1.0) << what << ": dk beyond the derived bound";
    EXPECT_LE(wv, 1.0) << what << ": dv beyond the derived bound";
    std::cout << ", dq " << wq << ", dk " << wk << ", dv " << wv << "\n";
  }
  if (bf16_kernel() != Bf16Kernel::kOneDnn)
    std::cout << "[ not run  ] the oneDNN kernel: this CPU has no native bf16 (or MEDTUNE_ISA "
                 "forbids it)\n";
}

// SmolLM2's head_dim and grouping at a small T; 80 queries = a full 64-query tile and a partial
// one; Smax > T leaves cache rows the backward must zero.
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBf16,
    ::testing::Values(Case{"gqa", {2, 80, 0, 83, 6, 2, 64}, false, false},
                      Case{"gqa_padded", {2, 80, 0, 80, 6, 2, 64}, true, false},
                      Case{"packed", {2, 80, 0, 80, 4, 2, 32}, false, true},
                      Case{"mha", {1, 70, 0, 72, 3, 3, 32}, false, false},
                      Case{"key_history", {2, 70, 9, 90, 4, 2, 32}, true, false}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The rounding is real: the bound above would also hold for an fp32 computation, so check that
// bf16 attention's output is not fp32's.
TEST(AttentionBf16Rounding, DiffersFromFp32) {
  const Problem x = make_problem(Case{"gqa", {1, 40, 0, 40, 4, 2, 64}, false, false}, 11);
  const AttentionShape& s = x.c.s;
  std::vector<float> o32(x.q.size()), o16(x.q.size());
  attention_forward(o32.data(), x.q.data(), x.k.data(), x.v.data(), nullptr, s);
  for (Bf16Kernel kernel : kernels_here()) {
    attention_forward_bf16(o16.data(), x.q.data(), x.k.data(), x.v.data(), nullptr, nullptr, s,
                           kernel);
    size_t differ = 0;
    for (size_t i = 0; i < o32.size(); ++i) differ += o32[i] != o16[i];
    EXPECT_GT(differ, o32.size() / 2)
        << kernel_label(kernel) << ": most elements should move by bf16's rounding";
  }
}

TEST(AttentionBf16Shape, BackwardRefusesAKeyHistory) {
  const AttentionShape s{1, 4, 2, 8, 2, 1, 8};
  std::vector<float> buf(64, 0.0f);
  EXPECT_THROW(attention_backward_bf16(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                       buf.data(), buf.data(), nullptr, nullptr, s),
               Internal);
}

}  // namespace
}  // namespace medtune::ops
