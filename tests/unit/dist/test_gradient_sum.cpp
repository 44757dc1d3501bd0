// dist/gradient_sum.h against a single process adding every micro-batch in order: the ordered
// (deterministic) sum over ranks must give the same bits for any split of the global batch; the
// all-reduce form equals it to fp32 reassociation. The ranks are threads (tests/support/thread_ranks.h).
#include "dist/gradient_sum.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "support/thread_ranks.h"

namespace medtune::dist {
namespace {

// Micro-batch m's "gradients": two parameters (sizes 5 and 3) of values spread over many
// magnitudes, so that adding them in another order changes the fp32 bits.
std::vector<std::vector<float>> micro_grads(int m) {
  std::mt19937 rng(1000 + static_cast<unsigned>(m));
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<std::vector<float>> g{std::vector<float>(5), std::vector<float>(3)};
  for (auto& p : g)
    for (float& x : p) x = std::ldexp(mant(rng), ex(rng));
  return g;
}
double micro_loss(int m) { return 0.1 * (m + 1) + 1e-9 * m * m; }

struct StepResult {
  std::vector<float> grads;  // both parameters, flattened
  double loss = 0;
};

// World `world` with `accum` micro-batches per rank: each rank's result.
std::vector<StepResult> run_world(int world, int accum, bool deterministic,
                                  size_t bucket_floats = StepGradientSum::kBucketFloats) {
  testing::ThreadHub hub(world);
  std::vector<StepResult> results(static_cast<size_t>(world));
  testing::run_thread_ranks(hub, false, [&](testing::ThreadRank& comm) {
    const int rank = comm.rank();
    std::vector<float> p0(5), p1(3);
    StepGradientSum sum(comm, {std::span<float>(p0), std::span<float>(p1)}, deterministic, bucket_floats);
    for (int step = 1; step <= 2; ++step) {  // twice: state is reset between steps
      sum.begin_step();
      for (int a = 0; a < accum; ++a) {
        const auto g = micro_grads(rank * accum + a + 100 * step);
        std::copy(g[0].begin(), g[0].end(), p0.begin());
        std::copy(g[1].begin(), g[1].end(), p1.begin());
        sum.add_micro_batch(micro_loss(rank * accum + a));
      }
      const double loss = sum.finish(step);
      StepResult& r = results[static_cast<size_t>(rank)];
      r.grads.assign(p0.begin(), p0.end());
      r.grads.insert(r.grads.end(), p1.begin(), p1.end());
      r.loss = loss;
    }
  });
  return results;
}

// The single-process order written out: micro-batch 0's gradients, then + 1, + 2, ... in fp32;
// the loss 0 + l0 + l1 + ... in double.
StepResult sequential(int micro_batches, int step) {
  StepResult r;
  r.grads.assign(8, 0.0f);
  for (int m = 0; m < micro_batches; ++m) {
    const auto g = micro_grads(m + 100 * step);
    std::vector<float> flat(g[0]);
    flat.insert(flat.end(), g[1].begin(), g[1].end());
    for (size_t i = 0; i < flat.size(); ++i) r.grads[i] = m == 0 ? flat[i] : r.grads[i] + flat[i];
    r.loss += micro_loss(m);
  }
  return r;
}

TEST(StepGradientSum, OrderedSumOverRanksIsBitIdenticalToOneProcess) {
  for (const auto& [world, accum] : std::vector<std::pair<int, int>>{{1, 6}, {2, 3}, {3, 2}, {6, 1}, {4, 1}}) {
    SCOPED_TRACE("world " + std::to_string(world) + " x accumulation " + std::to_string(accum));
    const StepResult want = sequential(world * accum, 2);
    for (const StepResult& got : run_world(world, accum, true)) {
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (size_t i = 0; i < want.grads.size(); ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(got.grads[i]), std::bit_cast<uint32_t>(want.grads[i])) << "element " << i;
      EXPECT_EQ(got.loss, want.loss);
    }
  }
}

// The same in buckets: 8 gradient floats in buckets of 3 (3, 3, 2: a short last one) and of 1,
// then the loss alone; each rank passes bucket b on before it receives bucket b + 1.
TEST(StepGradientSum, OrderedSumInBucketsIsBitIdenticalToOneProcess) {
  for (const size_t bucket : {size_t{1}, size_t{3}, size_t{8}}) {
    for (const auto& [world, accum] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {4, 1}}) {
      SCOPED_TRACE("bucket " + std::to_string(bucket) + ", world " + std::to_string(world) + " x accumulation " +
                   std::to_string(accum));
      const StepResult want = sequential(world * accum, 2);
      for (const StepResult& got : run_world(world, accum, true, bucket)) {
        ASSERT_EQ(got.grads.size(), want.grads.size());
        for (size_t i = 0; i < want.grads.size(); ++i)
          EXPECT_EQ(std::bit_cast<uint32_t>(got.grads[i]), std::bit_cast<uint32_t>(want.grads[i])) << "element " << i;
        EXPECT_EQ(got.loss, want.loss);
      }
    }
  }
}

// The test above can fail: adding the ranks' partial sums (the all-reduce form) changes bits for
// these gradients, and stays within fp32 reassociation of the exact sum.
TEST(StepGradientSum, AllReduceFormDiffersOnlyByReassociation) {
  const StepResult want = sequential(6, 2);
  const auto got = run_world(2, 3, false);
  bool any_bit_differs = false;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    EXPECT_EQ(got[0].grads[i], got[1].grads[i]) << "ranks disagree at " << i;
    any_bit_differs = any_bit_differs || got[0].grads[i] != want.grads[i];
    // Six terms: each addition rounds once, so the two orders differ by at most a few ulp of the
    // largest partial sum; 6 * 2^-24 relative to the sum of magnitudes bounds it.
    double mag = 0;
    for (int m = 0; m < 6; ++m) {
      const auto g = micro_grads(m + 200);
      mag += static_cast<double>(std::abs(i < 5 ? g[0][i] : g[1][i - 5]));
    }
    EXPECT_LE(std::abs(static_cast<double>(got[0].grads[i]) - static_cast<double>(want.grads[i])), 2 * 6 * 0x1p-24 * mag) << "element " << i;
  }
  EXPECT_TRUE(any_bit_differs) << "these gradients were chosen so that the order of the sum shows";
  EXPECT_NEAR(got[0].loss, want.loss, 1e-12);
}

}  // namespace
}  // namespace medtune::dist
