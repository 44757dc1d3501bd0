// AdamW and gradient clipping against PyTorch: tests/fixtures/optim/{adamw,clip}.json, written by
// tools/make_optimizer_fixtures.py from torch.optim.AdamW (foreach=False) and
// torch.nn.utils.clip_grad_norm_, each run in float32 and in float64 on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/grad_clip.h"
#include "train/optimizer.h"

namespace medtune {
namespace {

using nlohmann::json;

json load_fixture(const char* name) {
  const std::string path = std::string(MEDTUNE_SOURCE_DIR "/tests/fixtures/optim/") + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return json::parse(in);
}

// Fixture floats are JSON numbers holding the exact float64 value of each float32 (or float64)
// value, so reading them as double and casting loses nothing.
template <typename T>
std::vector<T> values(const json& j) {
  std::vector<T> out;
  for (const json& x : j) out.push_back(static_cast<T>(x.get<double>()));
  return out;
}

// Distance in units in the last place: how many representable values lie between a and b.
int64_t ulp_distance(float a, float b) {
  auto key = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}
int64_t ulp_distance(double a, double b) {
  auto key = [](double x) {
    const int64_t i = std::bit_cast<int64_t>(x);
    return i < 0 ? std::numeric_limits<int64_t>::min() - i : i;
  };
  const int64_t ka = key(a), kb = key(b);
  return ka > kb ? ka - kb : kb - ka;
}

template <typename T>
int64_t max_ulp(const std::vector<T>& got, const std::vector<T>& want) {
  EXPECT_EQ(got.size(), want.size());
  int64_t worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, ulp_distance(got[i], want[i]));
  return worst;
}

train::AdamWConfig config_of(const json& c) {
  return {c["lrs"][0].get<double>(), c["beta1"].get<double>(), c["beta2"].get<double>(),
          c["eps"].get<double>(), c["weight_decay"].get<double>()};
}

// Our AdamW repeats torch's operations in torch's order with torch's roundings
// (src/train/optimizer.cpp), so the moments, which only take multiplies, lerps and FMAs, must be
// bit-identical to torch's. The parameters are not quite: torch's x86 builds take sqrt from MKL's
// vector math library, which is not correctly rounded (measured with torch 2.15: 1 ulp off on
// ~16% of float32 inputs and ~1.3% of float64 ones), while std::sqrt is. So denom may differ by
// 1 ulp, the update by ~1 ulp of itself, and the parameter, whose ulp is at least the update's in
// these fixtures, by at most 1 ulp per step that the differences do not cancel in; they do not
// feed back into m and v (the gradients are given). Measured: at most 2 ulp over 5 steps, and
// the brief's bound is 2 ulp, so we hold it there.
constexpr int64_t kMaxUlpMoments = 0;
constexpr int64_t kMaxUlpParams = 2;

TEST(AdamW, Float32TrajectoryMatchesTorchToTheUlp) {
  const json fx = load_fixture("adamw.json");
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto lrs = c["lrs"].get<std::vector<double>>();
    std::vector<std::vector<float>> params, grads(c["params"].size());
    for (const json& p : c["params"]) params.push_back(values<float>(p["init"]));
    std::vector<train::ParamRef> refs;
    for (size_t i = 0; i < params.size(); ++i) {
      grads[i].resize(params[i].size());
      refs.push_back({c["params"][i]["name"].get<std::string>(), params[i].data(), grads[i].data(),
                      static_cast<int64_t>(params[i].size())});
    }
    train::AdamW opt(config_of(c), refs);
    for (size_t s = 0; s < lrs.size(); ++s) {
      // Copy into the buffers the optimizer points at (assigning a new vector would move them).
      for (size_t i = 0; i < params.size(); ++i)
        std::ranges::copy(values<float>(c["params"][i]["grads"][s]), grads[i].begin());
      opt.step(lrs[s]);
      EXPECT_EQ(opt.step_count(), static_cast<int64_t>(s + 1));
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_LE(max_ulp(params[i], values<float>(c["params"][i]["after_f32"][s])), kMaxUlpParams)
            << "param " << i << " after step " << s + 1;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const auto m = opt.m(i), v = opt.v(i);
      EXPECT_LE(max_ulp(std::vector<float>(m.begin(), m.end()),
                        values<float>(c["params"][i]["exp_avg_f32"])),
                kMaxUlpMoments);
      EXPECT_LE(max_ulp(std::vector<float>(v.begin(), v.end()),
                        values<float>(c["params"][i]["exp_avg_sq_f32"])),
                kMaxUlpMoments);
    }
  }
}

// The same arithmetic in double against torch's float64 run, with the same bounds for the same
// reasons (MKL's float64 sqrt is 1 ulp off less often, but it is).
TEST(AdamW, Float64UpdateMatchesTorchToTheUlp) {
  const json fx = load_fixture("adamw.json");
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto cfg = config_of(c);
    const auto lrs = c["lrs"].get<std::vector<double>>();
    for (const json& p : c["params"]) {
      auto param = values<double>(p["init"]);
      std::vector<double> m(param.size(), 0.0), v(param.size(), 0.0);
      for (size_t s = 0; s < lrs.size(); ++s) {
        const auto g = values<double>(p["grads"][s]);
        train::adamw_update<double>(param.data(), g.data(), m.data(), v.data(),
                                    static_cast<int64_t>(param.size()), cfg, lrs[s],
                                    static_cast<int64_t>(s + 1));
        EXPECT_LE(max_ulp(param, values<double>(p["after_f64"][s])), kMaxUlpParams)
            << "step " << s + 1;
      }
      EXPECT_LE(max_ulp(m, values<double>(p["exp_avg_f64"])), kMaxUlpMoments);
      EXPECT_LE(max_ulp(v, values<double>(p["exp_avg_sq_f64"])), kMaxUlpMoments);
    }
  }
}

// fp32 against the float64 answer: how far rounding takes the fp32 trajectory. Each step rounds
// p about 8 times (1 in the decay, and in the update 2 in m, 3 in v, 2 in denom, 3 in addcdiv;
// v's errors are halved by the sqrt), each time by at most 2^-24 of the value rounded, which is
// bounded by |p| or by the step, and the step is at most ~3.2 lr (Adam's |m^/sqrt(v^)| <=
// (1 - beta1) / sqrt(1 - beta2) ~ 3.2 for both fixture cases; we use 4). Errors in m and v carry
// over, which the running sum over steps covers. So after t steps:
//   |p32 - p64| <= 16 * 2^-24 * (|p64| + sum_{s<=t} 4 lr_s)     (2x headroom over 8 roundings).
// A decay applied in the wrong place moves p by ~lr * wd * |p| ~ 1e-6, past this bound (~1e-7).
TEST(AdamW, Float32StaysWithinRoundingOfTorchFloat64) {
  const json fx = load_fixture("adamw.json");
  const double u = std::ldexp(1.0, -24);
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto lrs = c["lrs"].get<std::vector<double>>();
    std::vector<std::vector<float>> params, grads(c["params"].size());
    for (const json& p : c["params"]) params.push_back(values<float>(p["init"]));
    std::vector<train::ParamRef> refs;
    for (size_t i = 0; i < params.size(); ++i) {
      grads[i].resize(params[i].size());
      refs.push_back({c["params"][i]["name"].get<std::string>(), params[i].data(), grads[i].data(),
                      static_cast<int64_t>(params[i].size())});
    }
    train::AdamW opt(config_of(c), refs);
    double lr_sum = 0;
    for (size_t s = 0; s < lrs.size(); ++s) {
      // Copy into the buffers the optimizer points at (assigning a new vector would move them).
      for (size_t i = 0; i < params.size(); ++i)
        std::ranges::copy(values<float>(c["params"][i]["grads"][s]), grads[i].begin());
      opt.step(lrs[s]);
      lr_sum += lrs[s];
      for (size_t i = 0; i < params.size(); ++i) {
        const auto want = values<double>(c["params"][i]["after_f64"][s]);
        for (size_t k = 0; k < want.size(); ++k) {
          const double tol = 16 * u * (std::abs(want[k]) + 4 * lr_sum);
          ASSERT_LE(std::abs(static_cast<double>(params[i][k]) - want[k]), tol)
              << "param " << i << "[" << k << "] after step " << s + 1;
        }
      }
    }
  }
}

// Resuming from (m, v, step count) continues exactly where an uninterrupted run would be.
TEST(AdamW, ResumeFromStateIsBitExact) {
  const train::AdamWConfig cfg{1e-3, 0.9, 0.999, 1e-8, 0.01};
  const std::vector<float> p0 = {0.5f, -0.25f, 0.125f, 3.0f, -7.0f};
  auto grad_at = [](int s) {
    return std::vector<float>{0.1f * static_cast<float>(s), -0.3f, 0.0f, 1.5f,
                              -0.01f * static_cast<float>(s)};
  };
  std::vector<float> a = p0, ga(a.size());
  train::AdamW full(cfg, {{"w", a.data(), ga.data(), static_cast<int64_t>(a.size())}});
  for (int s = 0; s < 5; ++s) {
    std::ranges::copy(grad_at(s), ga.begin());
    full.step(1e-3 * (s + 1));
  }
  std::vector<float> b = p0, gb(b.size());
  std::vector<float> m_saved, v_saved;
  {
    train::AdamW first(cfg, {{"w", b.data(), gb.data(), static_cast<int64_t>(b.size())}});
    for (int s = 0; s < 2; ++s) {
      std::ranges::copy(grad_at(s), gb.begin());
      first.step(1e-3 * (s + 1));
    }
    m_saved.assign(first.m(0).begin(), first.m(0).end());
    v_saved.assign(first.v(0).begin(), first.v(0).end());
  }
  train::AdamW resumed(cfg, {{"w", b.data(), gb.data(), static_cast<int64_t>(b.size())}});
  std::copy(m_saved.begin(), m_saved.end(), resumed.m(0).begin());
  std::copy(v_saved.begin(), v_saved.end(), resumed.v(0).begin());
  resumed.set_step_count(2);
  for (int s = 2; s < 5; ++s) {
    std::ranges::copy(grad_at(s), gb.begin());
    resumed.step(1e-3 * (s + 1));
  }
  EXPECT_EQ(resumed.step_count(), 5);
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(std::bit_cast<uint32_t>(a[k]), std::bit_cast<uint32_t>(b[k]));
}

TEST(AdamW, InvalidSettingsAreBadInput) {
  float p = 1, g = 1;
  const std::vector<train::ParamRef> one = {{"w", &p, &g, 1}};
  EXPECT_THROW(train::AdamW(train::AdamWConfig{-1e-3, 0.9, 0.999, 1e-8, 0.0}, one), BadInput);
  EXPECT_THROW(train::AdamW(train::AdamWConfig{1e-3, 1.0, 0.999, 1e-8, 0.0}, one), BadInput);
  EXPECT_THROW(train::AdamW(train::AdamWConfig{1e-3, 0.9, -0.1, 1e-8, 0.0}, one), BadInput);
  EXPECT_THROW(train::AdamW(train::AdamWConfig{1e-3, 0.9, 0.999, -1.0, 0.0}, one), BadInput);
  EXPECT_THROW(train::AdamW(train::AdamWConfig{1e-3, 0.9, 0.999, 1e-8, std::nan("")}, one),
               BadInput);
  train::AdamW opt(train::AdamWConfig{}, one);
  EXPECT_THROW(opt.step(-1.0), BadInput);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_THROW(opt.set_step_count(-1), BadInput);
}

// --- clip_grad_norm ------------------------------------------------------------------------------

struct ClipCase {
  std::vector<std::vector<float>> grads;
  std::vector<std::span<float>> spans;
};

ClipCase clip_case(const json& c) {
  ClipCase out;
  for (const json& g : c["grads"]) out.grads.push_back(values<float>(g));
  for (auto& g : out.grads) out.spans.emplace_back(g);
  return out;
}

// Tolerances, u = 2^-24:
// - norm vs torch float64: both sum 123 squares in double in different orders; the sum's relative
//   error is <= n * 2^-53 ~ 1.4e-14 each, the sqrt halves it: 1e-13 leaves margin.
// - norm vs torch float32: torch reduces in fp32 (per-tensor norms, then the norm of those), a
//   cascade of a few levels over <= 70 terms: relative error <= ~16 u ~ 9.5e-7; ours is exact.
// - clipped grads vs float64: our coefficient takes 4 fp32 roundings (norm to float, + 1e-6,
//   reciprocal, * max_norm) and the product one more: <= 5 u relative, plus slack for double
//   rounding of the norm: 6 u.
// - clipped grads vs float32: torch's coefficient carries its norm's error (16 u) plus the same
//   5 roundings as ours: 22 u.
constexpr double kNormRelF64 = 1e-13;
constexpr double kNormRelF32 = 16.0 / 16777216.0;
constexpr double kGradRelF64 = 6.0 / 16777216.0;
constexpr double kGradRelF32 = 22.0 / 16777216.0;

TEST(ClipGradNorm, MatchesTorchWhenClipping) {
  const json fx = load_fixture("clip.json");
  const json& c = fx["cases"][0];
  ASSERT_EQ(c["name"], "clips");
  ClipCase cc = clip_case(c);
  const double max_norm = c["max_norm"].get<double>();
  const double total = train::clip_grad_norm(cc.spans, max_norm);
  const double t64 = c["total_norm_f64"].get<double>(), t32 = c["total_norm_f32"].get<double>();
  ASSERT_GT(t64, max_norm);  // the fixture must exercise clipping
  EXPECT_LE(std::abs(total - t64), kNormRelF64 * t64);
  EXPECT_LE(std::abs(total - t32), kNormRelF32 * t32);
  for (size_t i = 0; i < cc.grads.size(); ++i) {
    const auto w64 = values<double>(c["clipped_f64"][i]);
    const auto w32 = values<double>(c["clipped_f32"][i]);
    for (size_t k = 0; k < w64.size(); ++k) {
      const double got = static_cast<double>(cc.grads[i][k]);
      EXPECT_LE(std::abs(got - w64[k]), kGradRelF64 * std::abs(w64[k])) << i << "[" << k << "]";
      EXPECT_LE(std::abs(got - w32[k]), kGradRelF32 * std::abs(w32[k])) << i << "[" << k << "]";
    }
  }
  // After clipping, the global norm is max_norm (to the coefficient's rounding and the 1e-6).
  EXPECT_NEAR(train::global_grad_norm(cc.spans), max_norm, 1e-5);
}

TEST(ClipGradNorm, LeavesSmallGradientsUntouched) {
  const json fx = load_fixture("clip.json");
  const json& c = fx["cases"][1];
  ASSERT_EQ(c["name"], "no_clip");
  ClipCase cc = clip_case(c);
  const double t64 = c["total_norm_f64"].get<double>();
  ASSERT_LT(t64, c["max_norm"].get<double>());
  const double total = train::clip_grad_norm(cc.spans, c["max_norm"].get<double>());
  EXPECT_LE(std::abs(total - t64), kNormRelF64 * t64);
  // torch multiplies by exactly 1.0 here, which changes no bit; nor do we.
  for (size_t i = 0; i < cc.grads.size(); ++i) {
    EXPECT_EQ(cc.grads[i], values<float>(c["clipped_f32"][i]));
    EXPECT_EQ(cc.grads[i], values<float>(c["grads"][i]));
  }
}

TEST(ClipGradNorm, NonFiniteNormPoisonsGradientsAsTorchDoes) {
  // torch (error_if_nonfinite=False): clip_coef = max_norm / (nan + 1e-6) = nan, and g *= nan.
  std::vector<float> a = {1.0f, std::nanf("")}, b = {2.0f};
  std::vector<std::span<float>> spans = {a, b};
  EXPECT_TRUE(std::isnan(train::clip_grad_norm(spans, 1.0)));
  EXPECT_TRUE(std::isnan(a[0]) && std::isnan(b[0]));
  EXPECT_THROW(train::clip_grad_norm(spans, 0.0), BadInput);
}

}  // namespace
}  // namespace medtune
