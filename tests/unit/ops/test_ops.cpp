// Every CPU op's fast path against its reference path, on tiny, odd and Llama-sized shapes.
//
// Tolerances (NMSE = sum (fast-ref)^2 / sum ref^2):
//  - elementwise fp32 ops (rope, swiglu): 1e-12. The paths differ only in whether an intermediate
//    is rounded to fp32 (relative error 2^-24 ~ 6e-8 per element, NMSE ~ 4e-15).
//  - reductions (rmsnorm, attention, linear): 1e-10. fp32 accumulation of K terms has relative
//    error ~ sqrt(K) * 2^-24 in practice; for K <= 4096 that is ~4e-6, NMSE ~ 2e-11.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <cmath>

#include "core/half.h"
#include "ops/linear.h"
#include "ops/ops.h"
#include "support/buffers.h"

namespace medtune {
namespace {

using testing::Guarded;
using testing::nmse;
using testing::random_vector;

constexpr double kElementwiseNmse = 1e-12;
constexpr double kReductionNmse = 1e-10;

struct NormCase { int64_t N, C; };
class RmsNormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormTest, FastMatchesReference) {
  const auto [N, C] = GetParam();
  auto x = random_vector(static_cast<size_t>(N * C), 1, -3, 3);
  auto w = random_vector(static_cast<size_t>(C), 2, 0.5f, 1.5f);
  Guarded y(x.size()), y_ref(x.size()), r(static_cast<size_t>(N)), r_ref(static_cast<size_t>(N));
  ops::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
  ops::ref::rmsnorm_forward(y_ref.data(), r_ref.data(), x.data(), w.data(), N, C, 1e-5f);
  EXPECT_TRUE(y.intact() && r.intact());
  EXPECT_LE(nmse(y.data(), y_ref.data(), y.size()), kReductionNmse);
  EXPECT_LE(nmse(r.data(), r_ref.data(), r.size()), kReductionNmse);
}
INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(NormCase{1, 1}, NormCase{3, 7}, NormCase{5, 576},
                                           NormCase{64, 4096}, NormCase{2, 33}));

TEST(RmsNorm, MatchesFormulaOnKnownValues) {
  // x = (3, 4): mean square 12.5, rstd = 1/sqrt(12.5 + 0) -> y = w * x / sqrt(12.5)
  const float x[2] = {3, 4}, w[2] = {1, 2};
  float y[2], r;
  ops::rmsnorm_forward(y, &r, x, w, 1, 2, 0.0f);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 8 / std::sqrt(12.5), 1e-6);
}

TEST(Rope, FastMatchesReferenceAndRotatesPairs) {
  const int64_t N = 5, H = 3, HD = 10;
  auto x = random_vector(static_cast<size_t>(N * H * HD), 3);
  auto cos = random_vector(static_cast<size_t>(N * HD / 2), 4);
  auto sin = random_vector(static_cast<size_t>(N * HD / 2), 5);
  auto fast = x, ref = x;
  ops::rope_forward(fast.data(), cos.data(), sin.data(), N, H, HD);
  ops::ref::rope_forward(ref.data(), cos.data(), sin.data(), N, H, HD);
  EXPECT_LE(nmse(fast.data(), ref.data(), fast.size()), kElementwiseNmse);
  // rotate-half pairs element i with i + HD/2: token 1, head 2, i = 3.
  const int64_t base = (1 * H + 2) * HD, i = 3;
  const float c = cos[static_cast<size_t>(1 * HD / 2 + i)], s = sin[static_cast<size_t>(1 * HD / 2 + i)];
  EXPECT_FLOAT_EQ(ref[static_cast<size_t>(base + i)], x[static_cast<size_t>(base + i)] * c - x[static_cast<size_t>(base + i + HD / 2)] * s);
  EXPECT_FLOAT_EQ(ref[static_cast<size_t>(base + i + HD / 2)], x[static_cast<size_t>(base + i + HD / 2)] * c + x[static_cast<size_t>(base + i)] * s);
}

TEST(SwiGlu, FastMatchesReference) {
  const size_t n = 1000;
  auto g = random_vector(n, 6, -8, 8), u = random_vector(n, 7);
  Guarded h(n), h_ref(n);
  ops::swiglu_forward(h.data(), g.data(), u.data(), static_cast<int64_t>(n));
  ops::ref::swiglu_forward(h_ref.data(), g.data(), u.data(), static_cast<int64_t>(n));
  EXPECT_TRUE(h.intact());
  EXPECT_LE(nmse(h.data(), h_ref.data(), n), kElementwiseNmse);
}

struct AttnCase { int64_t B, T, past, NH, NKV, HD; bool padding; };
class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, FastMatchesReference) {
  const auto p = GetParam();
  const int64_t Smax = p.past + p.T + 3;  // spare cache rows must be ignored
  ops::AttentionShape s{p.B, p.T, p.past, Smax, p.NH, p.NKV, p.HD};
  auto q = random_vector(static_cast<size_t>(p.B * p.T * p.NH * p.HD), 8, -2, 2);
  auto k = random_vector(static_cast<size_t>(p.B * Smax * p.NKV * p.HD), 9, -2, 2);
  auto v = random_vector(k.size(), 10);
  std::vector<uint8_t> valid(static_cast<size_t>(p.B * Smax), 1);
  if (p.padding)  // right padding of row B-1: its last two positions are padding
    for (int64_t j = p.past + p.T - 2; j < p.past + p.T; ++j) valid[static_cast<size_t>((p.B - 1) * Smax + j)] = 0;
  Guarded out(q.size()), out_ref(q.size());
  ops::attention_forward(out.data(), q.data(), k.data(), v.data(), valid.data(), s);
  ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(), valid.data(), s);
  EXPECT_TRUE(out.intact());
  EXPECT_FALSE(testing::any_nan(out.data(), out.size()));
  EXPECT_LE(nmse(out.data(), out_ref.data(), out.size()), kReductionNmse);
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttnCase{1, 1, 0, 1, 1, 2, false},
                                           AttnCase{2, 7, 0, 4, 2, 8, true},
                                           AttnCase{1, 1, 9, 9, 3, 64, false},   // decode, SmolLM2 heads
                                           AttnCase{2, 5, 4, 6, 6, 12, true},    // MHA, past + padding
                                           AttnCase{1, 33, 0, 8, 1, 16, false},   // MQA
                                           // Longer than one query tile (64): causal tiles, a ragged last one
                                           AttnCase{2, 150, 0, 6, 2, 16, true},
                                           AttnCase{1, 70, 5, 3, 1, 8, false},   // tiles after a key history
                                           // The decode path (T <= 4, head_dim 64 or 128): key counts
                                           // not multiples of its 4-key blocks, padding, fewer than 4 keys
                                           AttnCase{2, 3, 40, 9, 3, 64, true},
                                           AttnCase{2, 1, 6, 4, 2, 128, true},
                                           AttnCase{1, 2, 0, 2, 1, 64, false},
                                           AttnCase{1, 5, 3, 2, 1, 64, false}));  // 5 queries: tiles again

// The fixed-order attention (the int8 route's and the server's) against the reference: the same
// NMSE bound; head_dim 12 has no kernel and takes the reference's own per-query loop.
class FixedOrderAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(FixedOrderAttentionTest, MatchesReference) {
  const auto p = GetParam();
  const int64_t Smax = p.past + p.T + 3;
  ops::AttentionShape s{p.B, p.T, p.past, Smax, p.NH, p.NKV, p.HD};
  auto q = random_vector(static_cast<size_t>(p.B * p.T * p.NH * p.HD), 8, -2, 2);
  auto k = random_vector(static_cast<size_t>(p.B * Smax * p.NKV * p.HD), 9, -2, 2);
  auto v = random_vector(k.size(), 10);
  std::vector<uint8_t> valid(static_cast<size_t>(p.B * Smax), 1);
  if (p.padding)
    for (int64_t j = p.past + p.T - 2; j < p.past + p.T; ++j) valid[static_cast<size_t>((p.B - 1) * Smax + j)] = 0;
  Guarded out(q.size()), out_ref(q.size());
  ops::attention_forward_fixed_order(out.data(), q.data(), k.data(), v.data(), valid.data(), s);
  ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(), valid.data(), s);
  EXPECT_TRUE(out.intact());
  EXPECT_LE(nmse(out.data(), out_ref.data(), out.size()), kReductionNmse);
}
INSTANTIATE_TEST_SUITE_P(Shapes, FixedOrderAttentionTest,
                         ::testing::Values(AttnCase{1, 150, 0, 9, 3, 64, false},  // a prompt, 10 chunks of 16
                                           AttnCase{2, 37, 20, 4, 2, 128, true},  // after a cache, padding
                                           AttnCase{1, 17, 3, 2, 1, 80, false},
                                           AttnCase{2, 9, 2, 4, 2, 12, true}));   // no kernel: the reference

// What the fixed order is for: one query's bits whatever call computes it. A text of S tokens
// against one cache, read (a) in one call, (b) in chunks of 128 as the server reads prompts, (c) a
// first part then one token at a time (decode), and (d) as row 1 of a two-row call, right-padded
// beside a longer row (eval's batches). Every output element equal, not close. Heads per kv head
// 3 (SmolLM2), 5 and 8: the heads of a kv group go four at a time, then the rest (heads_query).
// (c) with 1, 2, 3 and 4 threads: which thread computes a kv head's queries changes nothing.
// On a CPU with AVX-512, (a), (b) and (d) score against transposed keys (attention_keys16.h) and
// (c)'s decode steps against the cache's rows: every head_dim with a kernel (8 to 32 lanes).
TEST(FixedOrderAttention, AQueryHasTheSameBitsInEveryCallShape) {
  struct Heads {
    int64_t NH, NKV;
  };
  for (const auto [NH, NKV] : {Heads{9, 3}, Heads{10, 2}, Heads{8, 1}})
  for (const int64_t HD : {32, 64, 80, 96, 128, 256}) {
    const int64_t S = 150, QD = NH * HD, KVD = NKV * HD, Smax = 170;
    auto q = random_vector(static_cast<size_t>(S * QD), 21, -2, 2);
    auto k = random_vector(static_cast<size_t>(Smax * KVD), 22, -2, 2);
    auto v = random_vector(k.size(), 23);
    const auto call = [&](float* out, const float* qs, int64_t past, int64_t T) {
      ops::attention_forward_fixed_order(out, qs, k.data(), v.data(), nullptr, {1, T, past, Smax, NH, NKV, HD});
    };
    std::vector<float> whole(q.size()), chunked(q.size()), decoded(q.size());
    call(whole.data(), q.data(), 0, S);
    for (int64_t t0 = 0; t0 < S; t0 += 128) {
      const int64_t T = std::min<int64_t>(128, S - t0);
      call(chunked.data() + t0 * QD, q.data() + t0 * QD, t0, T);
    }
    int64_t decode_differ = 0;
    const int threads = omp_get_max_threads();
    for (const int n : {1, 2, 3, 4}) {
      omp_set_num_threads(n);
      call(decoded.data(), q.data(), 0, 100);
      for (int64_t t = 100; t < S; ++t) call(decoded.data() + t * QD, q.data() + t * QD, t, 1);
      for (size_t i = 0; i < whole.size(); ++i) decode_differ += decoded[i] != whole[i];
    }
    omp_set_num_threads(threads);
    // (d): row 0 a longer text (T = 160 queries), row 1 this one, then padding.
    const int64_t T2 = 160;
    std::vector<float> q2(static_cast<size_t>(2 * T2 * QD), 0.5f), k2(static_cast<size_t>(2 * Smax * KVD), 0.25f);
    std::vector<float> v2(k2.size(), 1.0f), batched(q2.size());
    std::copy(q.begin(), q.end(), q2.begin() + T2 * QD);
    std::copy(k.begin(), k.end(), k2.begin() + Smax * KVD);
    std::copy(v.begin(), v.end(), v2.begin() + Smax * KVD);
    std::vector<uint8_t> valid(static_cast<size_t>(2 * Smax), 1);
    for (int64_t j = S; j < Smax; ++j) valid[static_cast<size_t>(Smax + j)] = 0;
    ops::attention_forward_fixed_order(batched.data(), q2.data(), k2.data(), v2.data(), valid.data(),
                                       {2, T2, 0, Smax, NH, NKV, HD});
    int64_t differ[3] = {0, decode_differ, 0};
    for (size_t i = 0; i < whole.size(); ++i) {
      differ[0] += chunked[i] != whole[i];
      differ[2] += batched[static_cast<size_t>(T2 * QD) + i] != whole[i];
    }
    const std::string shape = "NH " + std::to_string(NH) + ", NKV " + std::to_string(NKV) + ", HD " + std::to_string(HD);
    EXPECT_EQ(differ[0], 0) << shape << ": read in chunks of 128";
    EXPECT_EQ(differ[1], 0) << shape << ": decoded one token at a time (1-4 threads)";
    EXPECT_EQ(differ[2], 0) << shape << ": right-padded row of a batch";
  }
}

// Decode steps past the split threshold (ops/cpu/attention.cpp, decode_split: from 512 keys, when
// the kv heads do not divide among the threads): a text of 560 tokens read in one call, then its
// last 60 positions again as decode steps of 1 and of 3 queries, at 1-4 threads, in one row and
// in two (the last row hiding a key). The tasks are B * NKV: with heads 9/3, 10/2 and 8/1, one
// row splits at 2 threads (9/3, 8/1), 3 (10/2, 8/1) and 4 (all three), two rows at 3 (10/2, 8/1)
// and 4 (9/3, 8/1); the rest take the unsplit path. Every output element equal to the whole
// call's.
TEST(FixedOrderAttention, ADecodeStepSplitOverTheThreadsHasTheBitsOfTheWholeCall) {
  struct Heads {
    int64_t NH, NKV;
  };
  for (const int64_t B : {1, 2})
    for (const auto [NH, NKV] : {Heads{9, 3}, Heads{10, 2}, Heads{8, 1}})
      for (const int64_t HD : {64, 128}) {
        const int64_t S = 560, first = 500, QD = NH * HD, KVD = NKV * HD, Smax = 570;
        const auto q = random_vector(static_cast<size_t>(B * S * QD), 41, -2, 2);
        const auto k = random_vector(static_cast<size_t>(B * Smax * KVD), 42, -2, 2);
        const auto v = random_vector(k.size(), 43);
        std::vector<uint8_t> valid(static_cast<size_t>(B * Smax), 1);
        valid[static_cast<size_t>((B - 1) * Smax + 333)] = 0;
        // Rows (B, T, NH, HD) of a call at past with T queries, from position past of each row.
        const auto call = [&](int64_t past, int64_t T) {
          std::vector<float> qs(static_cast<size_t>(B * T * QD)), out(qs.size());
          for (int64_t b = 0; b < B; ++b)
            std::copy_n(q.begin() + (b * S + past) * QD, T * QD, qs.begin() + b * T * QD);
          ops::attention_forward_fixed_order(out.data(), qs.data(), k.data(), v.data(),
                                             valid.data(), {B, T, past, Smax, NH, NKV, HD});
          return out;
        };
        const std::vector<float> whole = call(0, S);
        const int threads = omp_get_max_threads();
        for (const int n : {1, 2, 3, 4})
          for (const int64_t T : {1, 3}) {
            omp_set_num_threads(n);
            int64_t differ = 0;
            for (int64_t t = first; t + T <= S; t += T) {
              const std::vector<float> step = call(t, T);
              for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < T * QD; ++i)
                  differ += step[static_cast<size_t>(b * T * QD + i)] !=
                            whole[static_cast<size_t>((b * S + t) * QD + i)];
            }
            omp_set_num_threads(threads);
            EXPECT_EQ(differ, 0) << B << " rows, NH " << NH << ", NKV " << NKV << ", HD " << HD
                                 << ", " << n << " threads, " << T << " queries a step";
          }
      }
}

// Keys hidden inside a query's causal window (a left-padded row, a hole) through both kernels:
// the prompt's (on AVX-512: transposed keys, 512-bit softmax and values) and the decode steps'
// (AVX2 loops over the cache's rows): every output element equal, and close to the reference.
// The first queries see only hidden keys: their rows are zeros in every form.
TEST(FixedOrderAttention, AKeyMaskGivesTheSameBitsInEveryCallShape) {
  for (const int64_t HD : {64, 128}) {
    const int64_t S = 150, NH = 9, NKV = 3, QD = NH * HD, KVD = NKV * HD, Smax = 160;
    auto q = random_vector(static_cast<size_t>(S * QD), 31, -2, 2);
    auto k = random_vector(static_cast<size_t>(Smax * KVD), 32, -2, 2);
    auto v = random_vector(k.size(), 33);
    std::vector<uint8_t> valid(static_cast<size_t>(Smax), 1);
    for (const int64_t j : {0, 1, 2, 3, 4, 37, 64, 65, 100, 147}) valid[static_cast<size_t>(j)] = 0;
    const auto call = [&](float* out, const float* qs, int64_t past, int64_t T) {
      ops::attention_forward_fixed_order(out, qs, k.data(), v.data(), valid.data(),
                                         {1, T, past, Smax, NH, NKV, HD});
    };
    std::vector<float> whole(q.size()), decoded(q.size()), ref(q.size());
    call(whole.data(), q.data(), 0, S);
    call(decoded.data(), q.data(), 0, 20);
    for (int64_t t = 20; t < S; ++t) call(decoded.data() + t * QD, q.data() + t * QD, t, 1);
    ops::ref::attention_forward(ref.data(), q.data(), k.data(), v.data(), valid.data(), nullptr,
                                {1, S, 0, Smax, NH, NKV, HD});
    int64_t differ = 0, nonzero_first = 0;
    for (size_t i = 0; i < whole.size(); ++i) differ += decoded[i] != whole[i];
    for (int64_t i = 0; i < 5 * QD; ++i) nonzero_first += whole[static_cast<size_t>(i)] != 0.0f;
    EXPECT_EQ(differ, 0) << "HD " << HD;
    EXPECT_EQ(nonzero_first, 0) << "HD " << HD << ": queries that see only hidden keys";
    EXPECT_LE(nmse(whole.data(), ref.data(), whole.size()), kReductionNmse) << "HD " << HD;
  }
}

// The half-cache form (the int8 route's KV cache, model/kv_cache.h) against the fp32 form on the
// same values widened: every output element equal. Cases: one decode query and a group of four
// (keys read in place, as half), prompts (each task's copy widens them), and head_dim 12 (no kernel:
// the reference on a widened copy).
TEST(FixedOrderAttention, HalfCacheGivesTheFp32BitsOfTheWidenedValues) {
  struct Case {
    int64_t B, T, past, NH, NKV, HD;
  };
  for (const Case& c : {Case{1, 1, 40, 9, 3, 64}, Case{2, 4, 37, 4, 2, 128}, Case{2, 3, 5, 9, 3, 64},
                        Case{1, 150, 0, 9, 3, 64}, Case{2, 37, 20, 4, 2, 128}, Case{2, 9, 2, 4, 2, 12}}) {
    const int64_t Smax = c.past + c.T + 3;
    const ops::AttentionShape s{c.B, c.T, c.past, Smax, c.NH, c.NKV, c.HD};
    const auto q = random_vector(static_cast<size_t>(c.B * c.T * c.NH * c.HD), 31, -2, 2);
    const auto k = random_vector(static_cast<size_t>(c.B * Smax * c.NKV * c.HD), 32, -2, 2);
    const auto v = random_vector(k.size(), 33);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    std::vector<float> kw(k.size()), vw(v.size());  // the half values widened
    for (size_t i = 0; i < k.size(); ++i) {
      k16[i] = f32_to_f16(k[i]);
      v16[i] = f32_to_f16(v[i]);
      kw[i] = f16_to_f32(k16[i]);
      vw[i] = f16_to_f32(v16[i]);
    }
    std::vector<uint8_t> valid(static_cast<size_t>(c.B * Smax), 1);
    valid[static_cast<size_t>((c.B - 1) * Smax + c.past + c.T - 1)] = 0;  // one padded key
    Guarded half(q.size());
    std::vector<float> fp32(q.size());
    ops::attention_forward_fixed_order(half.data(), q.data(), k16.data(), v16.data(), valid.data(), s);
    ops::attention_forward_fixed_order(fp32.data(), q.data(), kw.data(), vw.data(), valid.data(), s);
    EXPECT_TRUE(half.intact());
    int64_t differ = 0;
    for (size_t i = 0; i < fp32.size(); ++i) differ += half.data()[i] != fp32[i];
    EXPECT_EQ(differ, 0) << "T " << c.T << ", head_dim " << c.HD;
  }
}

// Appending to a half cache rounds as core/half.h's scalar conversion, element for element, in the
// vector body and the tail: ties to even, subnormal halves, the largest half, overflow to
// infinity, signed zeros and infinities; NaN stays NaN. Rows land at their stride, nothing beside.
TEST(StoreRowsF16, RoundsAsTheScalarConversion) {
  std::vector<float> x = random_vector(3 * 37, 40, -70000, 70000);
  const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -(1.0f + 0x1p-11f), 0x1p-24f, 0x1.8p-24f,
                           0x1p-25f, 0x1.0000002p-25f, 3e-6f, -4e-5f, 6.1e-5f, 65504.0f, 65519.0f,
                           65520.0f, -1e9f, 0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), 1e-30f, 0.1f, 0.2f, 0.3f};
  std::copy(std::begin(special), std::end(special), x.begin() + 30);  // in row 0's tail and row 1
  x[70] = std::numeric_limits<float>::quiet_NaN();
  constexpr int64_t kRows = 3, kCols = 37, kStride = 40;
  std::vector<uint16_t> dst(static_cast<size_t>(kRows * kStride), 0xABCD);
  ops::store_rows_f16(dst.data(), kStride, x.data(), kCols, kRows, kCols);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kStride; ++c) {
      const uint16_t got = dst[static_cast<size_t>(r * kStride + c)];
      if (c >= kCols) {
        EXPECT_EQ(got, 0xABCD) << "row " << r << " col " << c << " is not the row's";
        continue;
      }
      const float xi = x[static_cast<size_t>(r * kCols + c)];
      if (std::isnan(xi)) EXPECT_TRUE(std::isnan(f16_to_f32(got))) << "NaN at " << r * kCols + c;
      else EXPECT_EQ(got, f32_to_f16(xi)) << "x = " << xi << " at " << r * kCols + c;
    }
}

TEST(Attention, FirstTokenAttendsOnlyToItself) {
  // T = 2, one head: token 0's output must be exactly v[0] (softmax over one key).
  const float q[4] = {1, 2, 3, 4}, k[4] = {0.5f, 1, -1, 2}, v[4] = {7, 8, 9, 10};
  float out[4];
  ops::attention_forward(out, q, k, v, nullptr, {1, 2, 0, 2, 1, 1, 2});
  EXPECT_FLOAT_EQ(out[0], 7);
  EXPECT_FLOAT_EQ(out[1], 8);
}

TEST(Linear, F32FastMatchesReference) {
  for (auto [N, R, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 5}, {3, 70, 36}, {17, 129, 576}}) {
    auto x = random_vector(static_cast<size_t>(N * K), 11);
    auto w = random_vector(static_cast<size_t>(R * K), 12);
    auto bias = random_vector(static_cast<size_t>(R), 13);
    ops::StoredMatrix m{DType::F32, R, K, reinterpret_cast<const uint8_t*>(w.data())};
    Guarded y(static_cast<size_t>(N * R)), y_ref(y.size());
    ops::linear_forward(y.data(), x.data(), m, bias.data(), N);
    ops::ref::linear_forward(y_ref.data(), x.data(), m, bias.data(), N);
    EXPECT_TRUE(y.intact());
    EXPECT_LE(nmse(y.data(), y_ref.data(), y.size()), kReductionNmse) << N << "x" << R << "x" << K;
  }
}

TEST(Linear, StoredF16BothFastPathsMatchReference) {
  // N <= 4 takes the fused dequantize-and-dot path, N > 4 the dequantized panel + SGEMM path;
  // 129 rows are not a multiple of the 64-row panel.
  const int64_t R = 129, K = 576;
  auto wf = random_vector(static_cast<size_t>(R * K), 14);
  std::vector<uint16_t> w16(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w16[i] = f32_to_f16(wf[i]);
  ops::StoredMatrix m{DType::F16, R, K, reinterpret_cast<const uint8_t*>(w16.data())};
  for (int64_t N : {1, 3, 17}) {
    auto x = random_vector(static_cast<size_t>(N * K), 15);
    Guarded y(static_cast<size_t>(N * R)), y_ref(y.size());
    ops::linear_forward(y.data(), x.data(), m, nullptr, N);
    ops::ref::linear_forward(y_ref.data(), x.data(), m, nullptr, N);
    EXPECT_TRUE(y.intact());
    EXPECT_LE(nmse(y.data(), y_ref.data(), y.size()), kReductionNmse) << "N=" << N;
  }
}

TEST(CrossEntropy, IgnoresNegativeTargetsAndMatchesLogSumExp) {
  const float logits[6] = {1, 2, 3, 0, 0, 0};  // (2, 3)
  const int64_t targets[2] = {2, -100};
  auto r = ops::cross_entropy_sum(logits, targets, 2, 3);
  EXPECT_EQ(r.count, 1);
  EXPECT_NEAR(r.sum, std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0, 1e-12);
}

}  // namespace
}  // namespace medtune
