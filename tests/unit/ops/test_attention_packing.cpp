// Attention over packed rows (several examples per row, seg_start): the block-diagonal causal
// mask. The reference path against central finite differences in fp64, the fast path against
// the reference, and the property packing rests on: a packed row gives, example by example, the
// same bits as each example run as its own row, without computing anything across examples.
//
// Tolerances (derivations as in test_backward.cpp, whose constants these are):
//  - finite differences, h = 1e-6: |g − fd| ≤ 1e-6·(|g| + ‖g‖∞) (truncation ~1e-12, roundoff ~1e-10);
//  - fast fp32 vs reference: NMSE ≤ 1e-10 (fp32 sums of ≤ T terms, ~sqrt(T)·2^-24 relative);
//  - the fp64 forward vs ops::ref (fp32 out): NMSE ≤ 1e-12 (one fp32 rounding per output);
//  - packed vs separate rows: bit-identical. Each example's block is the same GEMMs on the same
//    memory strides with the same sizes and the same softmax loop, whichever row it sits in.
#include <gtest/gtest.h>

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

size_t sz(int64_t n) { return static_cast<size_t>(n); }
Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// A packed batch layout: the example lengths of each row (they sum to T), and padded keys.
struct PackCase {
  std::vector<std::vector<int64_t>> rows;  // example lengths per row
  int64_t NH, NKV, HD;
  std::vector<std::pair<int64_t, int64_t>> padded;  // (row, key) marked invalid
  int64_t T() const {
    int64_t t = 0;
    for (int64_t n : rows[0]) t += n;
    return t;
  }
  int64_t B() const { return static_cast<int64_t>(rows.size()); }
};
std::ostream& operator<<(std::ostream& os, const PackCase& c) {
  os << "rows";
  for (const auto& r : c.rows) {
    os << " [";
    for (int64_t n : r) os << n << " ";
    os << "]";
  }
  return os << " NH=" << c.NH << " NKV=" << c.NKV << " HD=" << c.HD;
}

std::vector<int64_t> seg_starts(const PackCase& c) {
  std::vector<int64_t> seg;
  for (const auto& row : c.rows) {
    int64_t t0 = 0;
    for (int64_t n : row) {
      for (int64_t i = 0; i < n; ++i) seg.push_back(t0);
      t0 += n;
    }
  }
  return seg;
}

std::vector<uint8_t> key_valid(const PackCase& c, int64_t Smax) {
  std::vector<uint8_t> v(sz(c.B() * Smax), 1);
  for (auto [b, j] : c.padded) v[sz(b * Smax + j)] = 0;
  return v;
}

// fp64 packed attention, written independently of ops::ref: query t sees keys [seg_start, t].
void attention_f64(Vec& out, const Vec& q, const Vec& k, const Vec& v, const uint8_t* valid,
                   const int64_t* seg, const ops::AttentionShape& s) {
  const int64_t group = s.NH / s.NKV, HD = s.HD;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  Vec w(sz(s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t g = h / group, lo = seg[sz(b * s.T + t)];
        const size_t qo = sz(((b * s.T + t) * s.NH + h) * HD);
        const auto ko = [&](int64_t j) { return sz(((b * s.Smax + j) * s.NKV + g) * HD); };
        const auto vis = [&](int64_t j) { return valid[sz(b * s.Smax + j)] != 0; };
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = lo; j <= t; ++j) {
          if (!vis(j)) continue;
          double d = 0;
          for (int64_t e = 0; e < HD; ++e) d += q[qo + sz(e)] * k[ko(j) + sz(e)];
          w[sz(j)] = d * scale;
          mx = std::max(mx, w[sz(j)]);
        }
        for (int64_t j = lo; j <= t; ++j)
          if (vis(j)) sum += (w[sz(j)] = std::exp(w[sz(j)] - mx));
        for (int64_t e = 0; e < HD; ++e) {
          double acc = 0;
          for (int64_t j = lo; j <= t; ++j)
            if (vis(j)) acc += w[sz(j)] * v[ko(j) + sz(e)];
          out[qo + sz(e)] = sum > 0 ? acc / sum : 0.0;
        }
      }
}

double worst_fd_error(Vec& x, const Vec& g, const std::function<double()>& L) {
  double g_inf = 0, worst = 0;
  for (double gi : g) g_inf = std::max(g_inf, std::fabs(gi));
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = L();
    x[i] = x0 - kFdStep;
    const double lm = L();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * kFdStep);
    worst = std::max(worst, std::fabs(g[i] - fd) / (std::fabs(g[i]) + g_inf + 1e-300));
  }
  return worst;
}

// Row 0: four examples, the last a lone padded key (its query sees nothing: zero output), one
// padded key inside the third; row 1: two examples. Smax = T + 1 (a spare cache row).
const PackCase kGqa{{{3, 1, 4, 1}, {2, 7}}, 4, 2, 6, {{0, 8}, {0, 5}}};

TEST(PackedAttentionF64, MatchesProjectReference) {
  const PackCase& c = kGqa;
  const int64_t T = c.T(), Smax = T + 1;
  const ops::AttentionShape s{c.B(), T, 0, Smax, c.NH, c.NKV, c.HD};
  const auto seg = seg_starts(c);
  const auto valid = key_valid(c, Smax);
  auto q = random_vector(sz(c.B() * T * c.NH * c.HD), 300, -2, 2);
  auto k = random_vector(sz(c.B() * Smax * c.NKV * c.HD), 301, -2, 2);
  auto v = random_vector(k.size(), 302);
  Vec out(q.size());
  attention_f64(out, to_double(q), to_double(k), to_double(v), valid.data(), seg.data(), s);
  std::vector<float> out_ref(q.size()), out64(q.size());
  ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(), valid.data(), seg.data(), s);
  for (size_t i = 0; i < out.size(); ++i) out64[i] = static_cast<float>(out[i]);
  EXPECT_LE(nmse(out64.data(), out_ref.data(), out.size()), kElementwiseNmse);
  // The lone padded example outputs zeros; its neighbours do not (the check can fail).
  for (int64_t e = 0; e < c.NH * c.HD; ++e) EXPECT_EQ(out_ref[sz(8 * c.NH * c.HD + e)], 0.0f);
  EXPECT_NE(out_ref[sz(7 * c.NH * c.HD)], 0.0f);
}

class PackedAttentionFd : public ::testing::TestWithParam<PackCase> {};

TEST_P(PackedAttentionFd, ReferenceBackwardMatchesFiniteDifferences) {
  const PackCase c = GetParam();
  const int64_t T = c.T(), Smax = T + 1;
  const ops::AttentionShape s{c.B(), T, 0, Smax, c.NH, c.NKV, c.HD};
  const auto seg = seg_starts(c);
  const auto valid = key_valid(c, Smax);
  auto q = to_double(random_vector(sz(c.B() * T * c.NH * c.HD), 310, -2, 2));
  auto k = to_double(random_vector(sz(c.B() * Smax * c.NKV * c.HD), 311, -2, 2));
  auto v = to_double(random_vector(k.size(), 312));
  const auto dout = to_double(random_vector(q.size(), 313));
  Vec dq(q.size()), dk(k.size()), dv(v.size());
  ops::ref::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), valid.data(), seg.data(), s);
  const std::function<double()> L = [&] {
    Vec out(q.size());
    attention_f64(out, q, k, v, valid.data(), seg.data(), s);
    double acc = 0;
    for (size_t i = 0; i < out.size(); ++i) acc += dout[i] * out[i];
    return acc;
  };
  EXPECT_LE(worst_fd_error(q, dq, L), kFdTolerance) << "dq";
  EXPECT_LE(worst_fd_error(k, dk, L), kFdTolerance) << "dk";
  EXPECT_LE(worst_fd_error(v, dv, L), kFdTolerance) << "dv";
}
INSTANTIATE_TEST_SUITE_P(Shapes, PackedAttentionFd,
                         ::testing::Values(kGqa,                                   // GQA + padding
                                           PackCase{{{2, 3}}, 3, 3, 4, {}},        // MHA
                                           PackCase{{{1, 1, 2}}, 2, 1, 4, {}}));   // MQA, 1-token examples

class PackedAttentionFast : public ::testing::TestWithParam<PackCase> {};

TEST_P(PackedAttentionFast, MatchesReferenceForwardAndBackward) {
  const PackCase c = GetParam();
  const int64_t T = c.T(), Smax = T + 1;
  const ops::AttentionShape s{c.B(), T, 0, Smax, c.NH, c.NKV, c.HD};
  const auto seg = seg_starts(c);
  const auto valid = key_valid(c, Smax);
  auto q = random_vector(sz(c.B() * T * c.NH * c.HD), 320, -2, 2);
  auto k = random_vector(sz(c.B() * Smax * c.NKV * c.HD), 321, -2, 2);
  auto v = random_vector(k.size(), 322);
  auto dout = random_vector(q.size(), 323);
  Guarded out(q.size()), out_ref(q.size());
  ops::attention_forward(out.data(), q.data(), k.data(), v.data(), valid.data(), seg.data(), s);
  ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(), valid.data(), seg.data(), s);
  EXPECT_TRUE(out.intact());
  EXPECT_FALSE(testing::any_nan(out.data(), out.size()));
  EXPECT_LE(nmse(out.data(), out_ref.data(), out.size()), kReductionNmse);
  Guarded dq(q.size()), dk(k.size()), dv(v.size()), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                          valid.data(), seg.data(), s);
  ops::ref::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), q.data(),
                               k.data(), v.data(), valid.data(), seg.data(), s);
  EXPECT_TRUE(dq.intact() && dk.intact() && dv.intact());
  for (const Guarded* g : {&dq, &dk, &dv}) EXPECT_FALSE(testing::any_nan(g->data(), g->size()));
  EXPECT_LE(nmse(dq.data(), dq_ref.data(), dq.size()), kReductionNmse);
  EXPECT_LE(nmse(dk.data(), dk_ref.data(), dk.size()), kReductionNmse);
  EXPECT_LE(nmse(dv.data(), dv_ref.data(), dv.size()), kReductionNmse);
}
INSTANTIATE_TEST_SUITE_P(Shapes, PackedAttentionFast,
                         ::testing::Values(kGqa, PackCase{{{40, 1, 23}, {64}}, 9, 3, 64, {{1, 63}}},  // SmolLM2 heads
                                           PackCase{{{5, 6}}, 6, 6, 12, {}},                      // MHA
                                           PackCase{{{1, 16, 16}}, 8, 1, 16, {}},                 // MQA
                                           // Examples longer than one query tile (64)
                                           PackCase{{{100, 30, 70}, {200}}, 6, 2, 16, {{0, 90}, {1, 150}}}));

// Each example of a packed row, run as its own row (B = 1, T = its length): the same bits, in the
// forward and in every gradient, on both paths.
TEST(PackedAttention, EachExampleEqualsItsOwnRowBitForBit) {
  const PackCase c{{{7, 1, 12, 4}}, 9, 3, 16, {}};
  const int64_t T = c.T(), QW = c.NH * c.HD, KW = c.NKV * c.HD;
  const ops::AttentionShape s{1, T, 0, T, c.NH, c.NKV, c.HD};
  const auto seg = seg_starts(c);
  auto q = random_vector(sz(T * QW), 330, -2, 2);
  auto k = random_vector(sz(T * KW), 331, -2, 2);
  auto v = random_vector(k.size(), 332);
  auto dout = random_vector(q.size(), 333);
  for (bool fast : {true, false}) {
    std::vector<float> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
    if (fast) {
      ops::attention_forward(out.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
      ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
    } else {
      ops::ref::attention_forward(out.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
      ops::ref::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
    }
    int64_t t0 = 0;
    for (int64_t n : c.rows[0]) {
      const ops::AttentionShape one{1, n, 0, n, c.NH, c.NKV, c.HD};
      const float* qs = q.data() + t0 * QW;
      const float* ks = k.data() + t0 * KW;
      const float* vs = v.data() + t0 * KW;
      const float* ds = dout.data() + t0 * QW;
      std::vector<float> o1(sz(n * QW)), dq1(o1.size()), dk1(sz(n * KW)), dv1(dk1.size());
      if (fast) {
        ops::attention_forward(o1.data(), qs, ks, vs, nullptr, one);
        ops::attention_backward(dq1.data(), dk1.data(), dv1.data(), ds, qs, ks, vs, nullptr, one);
      } else {
        ops::ref::attention_forward(o1.data(), qs, ks, vs, nullptr, one);
        ops::ref::attention_backward(dq1.data(), dk1.data(), dv1.data(), ds, qs, ks, vs, nullptr, one);
      }
      const auto bytes_q = sz(n * QW) * sizeof(float), bytes_k = sz(n * KW) * sizeof(float);
      EXPECT_EQ(0, std::memcmp(o1.data(), out.data() + t0 * QW, bytes_q)) << (fast ? "fast" : "ref") << " example at " << t0;
      EXPECT_EQ(0, std::memcmp(dq1.data(), dq.data() + t0 * QW, bytes_q)) << (fast ? "fast" : "ref") << " example at " << t0;
      EXPECT_EQ(0, std::memcmp(dk1.data(), dk.data() + t0 * KW, bytes_k)) << (fast ? "fast" : "ref") << " example at " << t0;
      EXPECT_EQ(0, std::memcmp(dv1.data(), dv.data() + t0 * KW, bytes_k)) << (fast ? "fast" : "ref") << " example at " << t0;
      t0 += n;
    }
  }
}

// The fast path skips the blocks between examples rather than computing and masking them:
// NaN keys and values in one example leave every other example finite (a masked product would
// still multiply the NaN values by zero probabilities, and 0·NaN = NaN).
TEST(PackedAttention, FastPathNeverTouchesOtherExamples) {
  const PackCase c{{{5, 6, 5}}, 4, 2, 8, {}};
  const int64_t T = c.T(), QW = c.NH * c.HD, KW = c.NKV * c.HD;
  const ops::AttentionShape s{1, T, 0, T, c.NH, c.NKV, c.HD};
  const auto seg = seg_starts(c);
  auto q = random_vector(sz(T * QW), 340, -2, 2);
  auto k = random_vector(sz(T * KW), 341, -2, 2);
  auto v = random_vector(k.size(), 342);
  auto dout = random_vector(q.size(), 343);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t t = 5; t < 11; ++t)  // the middle example
    for (int64_t e = 0; e < KW; ++e) k[sz(t * KW + e)] = v[sz(t * KW + e)] = nan;
  std::vector<float> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  ops::attention_forward(out.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
  ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), nullptr, seg.data(), s);
  for (int64_t t : {0, 1, 2, 3, 4, 11, 12, 13, 14, 15}) {
    EXPECT_FALSE(testing::any_nan(out.data() + t * QW, sz(QW))) << "out at " << t;
    EXPECT_FALSE(testing::any_nan(dq.data() + t * QW, sz(QW))) << "dq at " << t;
    EXPECT_FALSE(testing::any_nan(dk.data() + t * KW, sz(KW))) << "dk at " << t;
    EXPECT_FALSE(testing::any_nan(dv.data() + t * KW, sz(KW))) << "dv at " << t;
  }
  EXPECT_TRUE(testing::any_nan(out.data() + 5 * QW, sz(QW)));  // the poisoned example itself is NaN
}

TEST(PackedAttention, MalformedSegmentsAndKvHistoryAreRefused) {
  std::vector<float> buf(256, 0.0f);
  const ops::AttentionShape s{1, 4, 0, 4, 1, 1, 2};
  const std::vector<int64_t> gap{0, 0, 1, 2};       // position 2 neither starts nor continues
  const std::vector<int64_t> late{1, 1, 2, 2};      // row does not start at 0
  for (const auto* seg : {&gap, &late}) {
    EXPECT_THROW(ops::attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), nullptr, seg->data(), s), Internal);
    EXPECT_THROW(ops::ref::attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), nullptr, seg->data(), s), Internal);
    EXPECT_THROW(ops::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                         buf.data(), nullptr, seg->data(), s), Internal);
    EXPECT_THROW(ops::ref::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                              buf.data(), buf.data(), nullptr, seg->data(), s), Internal);
  }
  const std::vector<int64_t> ok{0, 1, 1, 3};
  EXPECT_NO_THROW(ops::attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), nullptr, ok.data(), s));
  const ops::AttentionShape history{1, 4, 2, 8, 1, 1, 2};
  EXPECT_THROW(ops::attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), nullptr, ok.data(), history), Internal);
}

}  // namespace
}  // namespace medtune
