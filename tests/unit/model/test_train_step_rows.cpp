// forward_backward's shortcuts, against the same step without them:
//  - the last layer's o_proj and MLP run only at the target rows (TrainOptions::
//    last_layer_rows_only; layer.h: LayerCall::out_rows). With completion-only targets (the last
//    2 positions of each row) the loss and every LoRA gradient equal those of the step that runs
//    the last layer on all rows, with and without gradient checkpointing and with LoRA dropout
//    (the rows subset must draw the masks the full rows do);
//  - with a target at every position the shortcut is skipped: bit-identical results.
//  - row shards: the rows split over several single-threaded passes (TrainOptions::row_shards).
// The other shortcuts (stacked LoRA A's of q/k/v and gate/up, no input gradient for layer 0) are
// on in both runs; tests/unit/model/test_packing.cpp and train/test_parity.cpp check those
// against transformers + PEFT.
//
// Tolerance: 1e-5 relative (max |a - b| / max |b|) per gradient tensor and for the loss. The
// two runs do the same arithmetic on the same rows; only the GEMMs over R target rows instead of
// all N rows block (and so sum) differently: fp32 summation-order rounding, ~6e-8·sqrt(K) for K
// terms, far below 1e-5 at these sizes, while a wrong row or a missing term is O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/row_shards.h"
#include "model/train_step.h"
#include "support/buffers.h"

namespace medtune {
namespace {

constexpr double kRowsOnly = 1e-5;

struct Step {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per LoRA tensor: dA, dB of each layer and projection
};

model::LoraWeights make_lora(const ModelConfig& c, double dropout) {
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.dropout = dropout;
  lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                model::Proj::gate, model::Proj::up, model::Proj::down};
  model::LoraWeights lora = model::init_lora(c, lc, 5);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      for (float& b : ll.B) b = nd(rng);  // B = 0 at init would leave dA = 0
  return lora;
}

// B x T random tokens; targets at the last `answer` positions of each row (-1: every position).
model::TrainBatch make_batch(int64_t V, int64_t B, int64_t T, int64_t answer) {
  model::TrainBatch b;
  b.B = B;
  b.T = T;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  for (int64_t n = 0; n < B * T; ++n) {
    b.ids.push_back(tok(rng));
    const bool target = answer < 0 || n % T >= T - answer;
    b.targets.push_back(target ? tok(rng) : -100);
  }
  return b;
}

Step step(model::LlamaModel& m, double dropout, const model::TrainBatch& b, bool rows_only, bool checkpointing,
          int64_t row_shards = 0) {
  model::LoraWeights lora = make_lora(m.config(), dropout);
  model::TrainOptions opt;
  opt.loss_scale = 0.25;
  opt.gradient_checkpointing = checkpointing;
  opt.dropout_seed = dropout > 0 ? 77 : 0;
  opt.last_layer_rows_only = rows_only;
  opt.row_shards = row_shards;
  lora.zero_grad();
  Step s;
  s.loss = model::forward_backward(m, lora, b, opt).loss_sum;
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer) {
      s.grads.push_back(ll.dA);
      s.grads.push_back(ll.dB);
    }
  return s;
}

using testing::max_rel;

void expect_close(const Step& got, const Step& want) {
  EXPECT_LE(std::fabs(got.loss - want.loss) / std::fabs(want.loss), kRowsOnly) << "loss";
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].size(), want.grads[i].size());
    EXPECT_LE(max_rel(got.grads[i], want.grads[i]), kRowsOnly) << "LoRA gradient tensor " << i;
  }
}

// Every gradient tensor (each layer's every projection) must be nonzero for the comparison to
// mean something: in particular the last layer's o/gate/up/down, which see only the target rows.
void expect_nonzero(const Step& s) {
  for (size_t i = 0; i < s.grads.size(); ++i) {
    double norm = 0;
    for (float v : s.grads[i]) norm += std::fabs(static_cast<double>(v));
    EXPECT_GT(norm, 0.0) << "LoRA gradient tensor " << i;
  }
}

// Fixtures: a plain Llama (safetensors), one with attention biases, and a GGUF one (q/k rows
// permuted, undone after projecting).
class RowsOnly : public ::testing::TestWithParam<std::string> {};

TEST_P(RowsOnly, CompletionOnlyTargetsMatchAllRows) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/" + GetParam()));
  const model::TrainBatch b = make_batch(m.config().vocab_size, 3, 9, 2);
  for (const double dropout : {0.0, 0.1})
    for (const bool checkpointing : {false, true}) {
      SCOPED_TRACE("dropout " + std::to_string(dropout) + (checkpointing ? ", checkpointing" : ""));
      const Step want = step(m, dropout, b, false, checkpointing);
      expect_nonzero(want);
      expect_close(step(m, dropout, b, true, checkpointing), want);
    }
}

TEST_P(RowsOnly, TargetsEverywhereSkipTheShortcut) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/" + GetParam()));
  const model::TrainBatch b = make_batch(m.config().vocab_size, 2, 7, -1);
  const Step want = step(m, 0.0, b, false, false);
  const Step got = step(m, 0.0, b, true, false);
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.grads, want.grads);
}

// Row shards (model/row_shards.h): the batch's rows split over 2 or 3 single-threaded passes give
// the one-pass loss and gradients up to the order of the shards' sums (same 1e-5 bound), LoRA
// dropout included (each shard draws its rows' masks), and run twice give the same bits.
TEST_P(RowsOnly, RowShardsMatchOnePass) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/" + GetParam()));
  const model::TrainBatch b = make_batch(m.config().vocab_size, 4, 9, 3);
  for (const double dropout : {0.0, 0.1}) {
    const Step want = step(m, dropout, b, true, false, 1);
    expect_nonzero(want);
    for (const int64_t shards : {2, 3}) {
      SCOPED_TRACE("dropout " + std::to_string(dropout) + ", " + std::to_string(shards) + " shards");
      const Step got = step(m, dropout, b, true, false, shards);
      expect_close(got, want);
      const Step again = step(m, dropout, b, true, false, shards);
      EXPECT_EQ(again.loss, got.loss);
      EXPECT_EQ(again.grads, got.grads);
    }
  }
}

TEST(RowShards, AutomaticCountFollowsRowsThreadsAndMemory) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/nf4/tiny_llama/base"));
  const ModelConfig& c = m.config();
  const model::LoraWeights small = make_lora(c, 0.0);  // r 4
  model::TrainOptions automatic;
  EXPECT_EQ(model::row_shards_for(c, small, 4, 256, automatic, 2), 2);
  EXPECT_EQ(model::row_shards_for(c, small, 6, 256, automatic, 4), 4);  // one per thread
  EXPECT_EQ(model::row_shards_for(c, small, 4, 256, automatic, 8), 1);  // cores would idle
  EXPECT_EQ(model::row_shards_for(c, small, 1, 256, automatic, 2), 1);
  EXPECT_EQ(model::row_shards_for(c, small, 4, 256, automatic, 1), 1);
  // Adapter copies larger than a quarter of the activations (rank 64, 1 token per row): one pass.
  model::LoraConfig big;
  big.r = 64;
  big.alpha = 64;
  big.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                 model::Proj::gate, model::Proj::up, model::Proj::down};
  const model::LoraWeights wide = model::init_lora(c, big, 1);
  ASSERT_GT(model::shard_copy_bytes(wide), 0.25 * model::planned_activation_bytes(c, wide, 4, false));
  EXPECT_EQ(model::row_shards_for(c, wide, 4, 1, automatic, 2), 1);
  model::TrainOptions asked;
  asked.row_shards = 3;
  EXPECT_EQ(model::row_shards_for(c, wide, 2, 1, asked, 1), 2);  // asked for, capped at B
}

TEST(RowShards, BadInputInAnyShardIsThrownToTheCaller) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/nf4/tiny_llama/base"));
  model::TrainBatch b = make_batch(m.config().vocab_size, 4, 5, 2);
  b.ids.back() = static_cast<int32_t>(m.config().vocab_size);  // last row: outside the vocabulary
  model::LoraWeights lora = make_lora(m.config(), 0.0);
  model::TrainOptions opt;
  opt.row_shards = 2;
  EXPECT_THROW(model::forward_backward(m, lora, b, opt), BadInput);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RowsOnly,
                         ::testing::Values("nf4/tiny_llama/base", "hf/llama_attn_bias/base",
                                           "gguf/tiny_llama.gguf"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(0, p.param.find('/'));
                           return n == "hf" ? std::string("attn_bias") : n;
                         });

}  // namespace
}  // namespace medtune
