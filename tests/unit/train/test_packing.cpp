// Sequence packing in the data path: first-fit decreasing, the epoch plan, the packed batch
// layout, and that a packed micro-batch trains exactly as its examples in separate rows (the
// tiny llama_gqa fixture, synthetic token ids).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/train_step.h"
#include "train/batcher.h"
#include "train/packing.h"
#include "train/trainer.h"
#include "support/buffers.h"

namespace medtune::train {
namespace {

std::vector<int64_t> iota(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(FirstFitDecreasing, PacksLargestFirstIntoTheFirstRowWithRoom) {
  //            0  1  2  3  4  5
  const std::vector<int64_t> sizes{4, 7, 2, 5, 3, 1};
  // Sorted 7 5 4 3 2 1 into bins of 10: 7 -> A; 5 -> B; 4 -> B (9); 3 -> A (10); 2 -> C; 1 -> B (10).
  const auto bins = first_fit_decreasing(sizes, iota(sizes.size()), 10);
  const std::vector<std::vector<int64_t>> want{{1, 4}, {3, 0, 5}, {2}};
  EXPECT_EQ(bins, want);
  // Ties keep the order they are given in (the epoch's shuffle).
  EXPECT_EQ(first_fit_decreasing({3, 3, 3}, {2, 0, 1}, 6), (std::vector<std::vector<int64_t>>{{2, 0}, {1}}));
  EXPECT_THROW(first_fit_decreasing({11}, {0}, 10), Internal);
  EXPECT_TRUE(first_fit_decreasing({}, {}, 10).empty());
}

TEST(FirstFitDecreasing, IsCloseToTheFewestRowsAndLosesNothing) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> sizes(500);
    for (auto& s : sizes) s = 1 + static_cast<int64_t>(rng() % 200);
    const int64_t cap = 256;
    const auto bins = first_fit_decreasing(sizes, iota(sizes.size()), cap);
    std::vector<int64_t> seen;
    for (const auto& b : bins) {
      int64_t used = 0;
      for (int64_t i : b) used += sizes[static_cast<size_t>(i)];
      EXPECT_LE(used, cap);
      seen.insert(seen.end(), b.begin(), b.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, iota(sizes.size()));
    // FFD <= 11/9 OPT + 6/9 and OPT >= ceil(total / cap).
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    const double lower = std::ceil(static_cast<double>(total) / static_cast<double>(cap));
    EXPECT_LE(static_cast<double>(bins.size()), 11.0 / 9.0 * lower + 6.0 / 9.0 + 1e-9);
  }
}

TEST(NextFit, OpensARowWhenTheNextItemDoesNotFit) {
  EXPECT_EQ(next_fit({4, 5, 2, 6, 0}, 10), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3, 4}}));
}

std::vector<int64_t> random_lengths(size_t n, uint64_t seed, int64_t max_len) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lengths(n);
  for (auto& l : lengths) l = 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_len - 1));  // 2..max_len
  return lengths;
}

// Examples of the given lengths whose tokens encode (example, position), so a batch can be read back.
std::vector<Example> examples_of(const std::vector<int64_t>& lengths) {
  std::vector<Example> ex;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Example e;
    const int64_t nctx = std::max<int64_t>(1, lengths[i] / 2);
    for (int64_t t = 0; t < lengths[i]; ++t) {
      const auto id = static_cast<int32_t>(1 + (static_cast<int64_t>(i) * 7 + t * 3) % 97);
      (t < nctx ? e.context : e.answer).push_back(id);
    }
    e.source = "synthetic:" + std::to_string(i + 1);
    ex.push_back(std::move(e));
  }
  return ex;
}

TEST(PackedPlan, EveryExampleOnceInRowsOfSequenceLen) {
  const int64_t seq = 64;
  const auto lengths = random_lengths(300, 3, seq + 1);  // up to seq + 1 tokens: seq inputs
  const auto ex = examples_of(lengths);
  BatchPlanOptions opt;
  opt.micro_batch_size = 3;
  opt.seed = 5;
  opt.sample_packing = true;
  opt.sequence_len = seq;
  const auto plan = plan_epoch(lengths, opt, 0);
  EXPECT_EQ(plan, plan_epoch(lengths, opt, 0));
  EXPECT_NE(plan, plan_epoch(lengths, opt, 1));
  opt.seed = 6;
  EXPECT_NE(plan, plan_epoch(lengths, opt, 0));
  opt.seed = 5;
  EXPECT_EQ(static_cast<int64_t>(plan.size()), micro_batches_per_epoch(lengths, opt));
  // The rows make_batch lays out are FFD's rows: as many in all, each within sequence_len.
  std::vector<int64_t> sizes;
  for (int64_t l : lengths) sizes.push_back(l - 1);
  const auto ffd_rows = first_fit_decreasing(sizes, iota(sizes.size()), seq);
  int64_t rows = 0, real = 0;
  std::multiset<int64_t> seen;
  for (const auto& mb : plan) {
    const auto b = make_batch(ex, mb, false, 0, seq);
    EXPECT_LE(b.B, opt.micro_batch_size);
    EXPECT_LE(b.T, seq);
    rows += b.B;
    for (uint8_t m : b.mask) real += m;
    seen.insert(mb.begin(), mb.end());
  }
  EXPECT_EQ(rows, static_cast<int64_t>(ffd_rows.size()));
  EXPECT_EQ(seen.size(), lengths.size());
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), lengths.size());
  EXPECT_EQ(real, std::accumulate(sizes.begin(), sizes.end(), int64_t{0}));
  // Packing pays: far fewer rows than examples (lengths average ~33 of 64).
  EXPECT_LT(rows, static_cast<int64_t>(lengths.size()) * 6 / 10);
}

TEST(PackedPlan, StepPlanCountsPackedMicroBatches) {
  TrainConfig cfg;
  cfg.micro_batch_size = 2;
  cfg.gradient_accumulation_steps = 3;
  cfg.num_epochs = 1;
  cfg.max_steps = -1;
  cfg.sequence_len = 10;
  cfg.sample_packing = true;
  // Inputs (length - 1): 9 9 5 5 5 5 1 1 -> FFD rows [9 1] [9 1] [5 5] [5 5] = 4 rows, 2 micro-batches.
  const std::vector<int64_t> lengths{10, 10, 6, 6, 6, 6, 2, 2};
  const auto p = plan_steps(cfg, lengths);
  EXPECT_EQ(p.batches_per_epoch, 2);
  EXPECT_EQ(p.total_steps, 1);
  EXPECT_THROW(plan_steps(cfg, int64_t{8}), Internal);  // the count alone cannot say
  cfg.sample_packing = false;
  EXPECT_EQ(plan_steps(cfg, lengths).batches_per_epoch, 4);
  EXPECT_EQ(plan_steps(cfg, int64_t{8}).batches_per_epoch, 4);
}

TEST(PackedBatch, EachExampleKeepsItsIdsTargetsAndPositions) {
  const auto ex = examples_of({6, 3, 9, 2, 5});
  const std::vector<int64_t> order{2, 0, 4, 1, 3};  // inputs 8 5 4 2 1 into rows of 10: [8] [5 4] [2 1]
  for (bool inputs : {false, true}) {
    const auto packed = make_batch(ex, order, inputs, 0, 10);
    ASSERT_EQ(packed.B, 3);
    ASSERT_EQ(packed.T, 9);
    int64_t r = 0, t0 = 0, targets = 0;
    const std::vector<int64_t> row_of{0, 1, 1, 2, 2};
    for (size_t k = 0; k < order.size(); ++k) {
      if (row_of[k] != r) {
        for (int64_t t = t0; t < packed.T; ++t) {  // the row's padding: its own segment, no target
          const auto at = static_cast<size_t>(r * packed.T + t);
          EXPECT_EQ(packed.mask[at], 0);
          EXPECT_EQ(packed.targets[at], -100);
          EXPECT_EQ(packed.positions[at], t - t0);
        }
        r = row_of[k];
        t0 = 0;
      }
      const auto alone = make_batch(ex, {order[k]}, inputs, 0);
      for (int64_t t = 0; t < alone.T; ++t) {
        const auto at = static_cast<size_t>(r * packed.T + t0 + t);
        EXPECT_EQ(packed.ids[at], alone.ids[static_cast<size_t>(t)]);
        EXPECT_EQ(packed.targets[at], alone.targets[static_cast<size_t>(t)]);
        EXPECT_EQ(packed.mask[at], 1);
        EXPECT_EQ(packed.positions[at], t);
      }
      targets += count_targets(alone);
      t0 += alone.T;
    }
    EXPECT_EQ(count_targets(packed), targets);
  }
}

std::vector<float> flat_grads(const model::LoraWeights& lora) {
  std::vector<float> g;
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer) {
      g.insert(g.end(), ll.dA.begin(), ll.dA.end());
      g.insert(g.end(), ll.dB.begin(), ll.dB.end());
    }
  return g;
}

using testing::max_rel;

// A packed micro-batch (2 rows holding 7 examples) trains as the 7 examples in 7 padded rows:
// the same loss and LoRA gradients, with and without gradient checkpointing. Tolerance 1e-5 of
// the largest element, as tests/unit/model/test_packing.cpp derives it (same fp32 work, other
// GEMM shapes and summation order).
TEST(PackedTraining, PackedMicroBatchEqualsSeparateRows) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base"));
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o, model::Proj::gate,
                model::Proj::up, model::Proj::down};
  auto lora = model::init_lora(m.config(), lc, 1);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      for (auto& b : ll.B) b = u(rng);  // B != 0, so every gradient is non-trivial
  m.set_lora(&lora);
  const auto ex = examples_of({9, 4, 13, 6, 2, 11, 7});
  const std::vector<int64_t> idx{2, 5, 0, 6, 3, 1, 4};  // inputs 12 10 8 6 5 3 1: rows of 24 -> [12 10] [8 6 5 3 1]
  const auto packed = make_batch(ex, idx, false, 0, 24);
  const auto rows = make_batch(ex, idx, false, 0);
  ASSERT_EQ(packed.B, 2);
  ASSERT_EQ(rows.B, 7);
  const int64_t n = count_targets(rows);
  ASSERT_EQ(count_targets(packed), n);
  for (bool ckpt : {false, true}) {
    model::TrainOptions opt;
    opt.loss_scale = 1.0 / static_cast<double>(n);
    opt.gradient_checkpointing = ckpt;
    lora.zero_grad();
    const auto rp = model::forward_backward(m, lora, packed, opt);
    const auto gp = flat_grads(lora);
    lora.zero_grad();
    const auto ru = model::forward_backward(m, lora, rows, opt);
    const auto gu = flat_grads(lora);
    EXPECT_EQ(rp.tokens, ru.tokens);
    EXPECT_LE(std::fabs(rp.loss_sum - ru.loss_sum), 1e-5 * std::fabs(ru.loss_sum)) << "checkpointing " << ckpt;
    EXPECT_LE(max_rel(gp, gu), 1e-5) << "checkpointing " << ckpt;
    const auto lp = model::forward_loss(m, packed);
    EXPECT_LE(std::fabs(lp.loss_sum - ru.loss_sum), 1e-5 * std::fabs(ru.loss_sum));
  }
  m.set_lora(nullptr);
}

}  // namespace
}  // namespace medtune::train
