// Sequence packing at the model level, on every tiny Hugging Face fixture (tests/fixtures/hf):
// the fixture's two rows packed into one row (positions restarting at 0, attention kept inside
// each example) give the logits, loss and LoRA gradients of the two rows run apart, and those of
// transformers + PEFT in float64 (the unpacked reference: transformers packs sequences through
// position_ids only with flash-attention's varlen kernels, a GPU path, so the fixtures hold the
// unpacked batch and packed == unpacked is the main evidence).
//
// Tolerances:
//  - packed vs unpacked, both medtune fp32: the per-token work is the same, but the GEMMs run over
//    21 rows instead of 24 (different BLAS blocking) and the LoRA gradients sum over tokens in
//    another order. fp32 sums of K terms carry ~sqrt(K)·2^-24 ≈ 6e-8·sqrt(K) relative error; over
//    a few layers and the ~100-term reductions here, 1e-5 of the largest element bounds that with
//    margin, while a token attending across the example boundary or a position not restarting
//    moves logits by O(1) (checked below: the check fails on such a batch).
//  - against transformers' float64: the bounds medtune-parity states (train/parity.h): 1e-4 of
//    the largest logit / gradient, 1e-4 relative for the loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor_convert.h"
#include "io/checkpoint.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "model/train_step.h"
#include "support/buffers.h"

namespace medtune {
namespace {

constexpr double kPackedVsUnpacked = 1e-5;
constexpr double kVsTransformers = 1e-4;

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "meta.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

using testing::max_rel;

std::vector<float> flat_grads(const model::LoraWeights& lora) {
  std::vector<float> g;
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer) {
      g.insert(g.end(), ll.dA.begin(), ll.dA.end());
      g.insert(g.end(), ll.dB.begin(), ll.dB.end());
    }
  return g;
}

// The fixture's batch (B rows, right padded) as transformers trains it, and the same examples
// packed into one row; `where[n]` = the packed position of unpacked token n (-1 for padding).
struct Batches {
  model::TrainBatch unpacked, packed;
  std::vector<int64_t> where;
};

Batches fixture_batches(const io::SafetensorsFile& ref) {
  const auto& ids_t = ref.tensors.at("input_ids");
  const int64_t B = ids_t.shape[0], T = ids_t.shape[1];
  const auto ids = tensor_to_i64(ids_t);
  const auto mask = tensor_to_i64(ref.tensors.at("attention_mask"));
  const auto labels = tensor_to_i64(ref.tensors.at("labels"));
  Batches out;
  model::TrainBatch& u = out.unpacked;
  u.B = B;
  u.T = T;
  u.targets.assign(static_cast<size_t>(B * T), -100);
  model::TrainBatch& p = out.packed;
  p.B = 1;
  out.where.assign(static_cast<size_t>(B * T), -1);
  for (int64_t b = 0; b < B; ++b) {
    int64_t pos = 0;
    for (int64_t t = 0; t < T; ++t) {
      const auto n = static_cast<size_t>(b * T + t);
      u.ids.push_back(static_cast<int32_t>(ids[n]));
      u.mask.push_back(mask[n] != 0 ? 1 : 0);
      // transformers' shift: the logits at t predict labels[t + 1] of the same row.
      if (t + 1 < T) u.targets[n] = labels[n + 1];
      if (mask[n] == 0) continue;
      out.where[n] = static_cast<int64_t>(p.ids.size());
      p.ids.push_back(u.ids.back());
      p.mask.push_back(1);
      p.targets.push_back(u.targets[n]);
      p.positions.push_back(pos++);
    }
  }
  p.T = static_cast<int64_t>(p.ids.size());
  return out;
}

struct RunResult {
  std::vector<float> logits;  // (N, V)
  double loss_sum = 0;
  int64_t tokens = 0;
  std::vector<float> grads;
};

RunResult run(model::LlamaModel& m, model::LoraWeights& lora, const model::TrainBatch& b, int64_t count) {
  RunResult r;
  r.logits = model::forward_logits(m, b);
  model::TrainOptions opt;
  opt.loss_scale = 1.0 / static_cast<double>(count);
  lora.zero_grad();
  const auto res = model::forward_backward(m, lora, b, opt);
  r.loss_sum = res.loss_sum;
  r.tokens = res.tokens;
  r.grads = flat_grads(lora);
  return r;
}

class PackedFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedFixture, PackedRowEqualsSeparateRowsAndTransformers) {
  const std::string dir = GetParam();
  const auto ref = io::read_safetensors(dir + "/reference.safetensors");
  model::LlamaModel m(io::open_checkpoint(dir + "/base"));
  const int64_t V = m.config().vocab_size;
  auto lora = model::lora_from_peft(io::read_peft_adapter(dir + "/adapter_init"), m.config(), dir + "/adapter_init");
  m.set_lora(&lora);
  const Batches bt = fixture_batches(ref);
  ASSERT_GT(bt.unpacked.B, 1);
  int64_t count = 0;
  for (int64_t t : bt.unpacked.targets) count += t >= 0;
  const RunResult u = run(m, lora, bt.unpacked, count);
  const RunResult p = run(m, lora, bt.packed, count);

  // Logits of every real token, gathered in unpacked order, against the unpacked run and HF.
  const auto hf_logits = tensor_to_f64(ref.tensors.at(ref.tensors.count("lora_logits_f64") ? "lora_logits_f64" : "lora_logits"));
  std::vector<float> got, want;
  std::vector<double> hf;
  for (size_t n = 0; n < bt.where.size(); ++n) {
    if (bt.where[n] < 0) continue;
    const auto pn = static_cast<size_t>(bt.where[n]) * static_cast<size_t>(V), un = n * static_cast<size_t>(V);
    got.insert(got.end(), p.logits.begin() + static_cast<std::ptrdiff_t>(pn), p.logits.begin() + static_cast<std::ptrdiff_t>(pn + static_cast<size_t>(V)));
    want.insert(want.end(), u.logits.begin() + static_cast<std::ptrdiff_t>(un), u.logits.begin() + static_cast<std::ptrdiff_t>(un + static_cast<size_t>(V)));
    hf.insert(hf.end(), hf_logits.begin() + static_cast<std::ptrdiff_t>(un), hf_logits.begin() + static_cast<std::ptrdiff_t>(un + static_cast<size_t>(V)));
  }
  EXPECT_LE(max_rel(got, want), kPackedVsUnpacked) << "logits, packed vs unpacked";
  EXPECT_LE(max_rel(got, hf), kVsTransformers) << "logits, packed vs transformers (unpacked)";

  EXPECT_EQ(p.tokens, u.tokens);
  EXPECT_EQ(p.tokens, count);
  EXPECT_LE(std::fabs(p.loss_sum - u.loss_sum) / std::fabs(u.loss_sum), kPackedVsUnpacked) << "loss";
  std::ifstream meta_in(dir + "/meta.json");
  const auto meta = nlohmann::json::parse(meta_in);
  const double hf_loss = meta.at("lora_loss").get<double>();
  EXPECT_LE(std::fabs(p.loss_sum / static_cast<double>(count) - hf_loss) / std::max(1.0, std::fabs(hf_loss)), kVsTransformers);

  EXPECT_LE(max_rel(p.grads, u.grads), kPackedVsUnpacked) << "LoRA gradients, packed vs unpacked";
  const auto hf_grads_file = io::read_safetensors(dir + "/lora_grads.safetensors");
  std::vector<double> hf_grads;
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (int pj = 0; pj < model::kNumProj; ++pj) {
      const std::string prefix = "base_model.model." + model::proj_module_path(static_cast<int64_t>(l), static_cast<model::Proj>(pj));
      if (!lora.layers[l][static_cast<size_t>(pj)].enabled()) continue;
      for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
        const auto g = tensor_to_f64(hf_grads_file.tensors.at(prefix + suffix));
        hf_grads.insert(hf_grads.end(), g.begin(), g.end());
      }
    }
  std::vector<float> enabled_grads;
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer)
      if (ll.enabled()) {
        enabled_grads.insert(enabled_grads.end(), ll.dA.begin(), ll.dA.end());
        enabled_grads.insert(enabled_grads.end(), ll.dB.begin(), ll.dB.end());
      }
  ASSERT_EQ(enabled_grads.size(), hf_grads.size());
  EXPECT_LE(max_rel(enabled_grads, hf_grads), kVsTransformers) << "LoRA gradients, packed vs transformers";
  m.set_lora(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackedFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return std::filesystem::path(p.param).filename().string();
                         });

// The comparison can fail: the same packed row with positions that do not restart (the second
// example continues at 12, 13, ...: one long sequence seen through the causal mask alone) or with
// a position that breaks the tiling.
TEST(PackedBatch, WithoutRestartingPositionsTheLogitsDiffer) {
  const std::string dir = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa";
  const auto ref = io::read_safetensors(dir + "/reference.safetensors");
  model::LlamaModel m(io::open_checkpoint(dir + "/base"));
  Batches bt = fixture_batches(ref);
  const auto packed = model::forward_logits(m, bt.packed);
  model::TrainBatch joined = bt.packed;
  for (size_t t = 0; t < joined.positions.size(); ++t) joined.positions[t] = static_cast<int64_t>(t);
  EXPECT_GT(max_rel(model::forward_logits(m, joined), packed), 100 * kPackedVsUnpacked);
  model::TrainBatch broken = bt.packed;
  broken.positions[3] = 7;
  EXPECT_THROW(model::forward_logits(m, broken), Internal);
}

// Mistral's sliding window (32 in the fixture) bounds how far one token attends: a packed row of
// 40 tokens is exact when each example is within the window, one 40-token sequence is not.
TEST(PackedBatch, SlidingWindowAppliesToEachExample) {
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/mistral/base"));
  ASSERT_EQ(m.config().sliding_window, 32);
  model::TrainBatch b;
  b.B = 1;
  b.T = 40;
  for (int64_t t = 0; t < b.T; ++t) {
    b.ids.push_back(static_cast<int32_t>(1 + t % 50));
    b.targets.push_back(-100);
    b.positions.push_back(t % 20);  // two examples of 20 tokens
  }
  EXPECT_NO_THROW(model::forward_logits(m, b));
  b.positions.clear();
  EXPECT_THROW(model::forward_logits(m, b), BadInput);
}

}  // namespace
}  // namespace medtune
