// A PEFT adapter that adapts only some modules (layers_to_transform [0, 2], layers_pattern
// "layers", exclude_modules ["o_proj", "model.layers.2.mlp.up_proj"]) on a 3-layer Llama, against
// PEFT itself: tests/fixtures/peft/layers_to_transform, written by
// tools/make_peft_layers_fixture.py. medtune must read the options, agree with PEFT on which of
// the model's 21 projections carry a LoRA layer, and give PEFT's logits.
//
// Tolerance: the bound medtune-parity states for an fp32 forward against a float64 reference
// (train/parity.h, ParityTolerances::logits_rel): 1e-4 of the largest logit. The adapter moves
// logits by up to ~7 (meta.json), so a module missing or bound to the wrong projection would show
// far above it.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor_convert.h"
#include "io/checkpoint.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "support/buffers.h"

namespace medtune {
namespace {

const std::string kDir = MEDTUNE_SOURCE_DIR "/tests/fixtures/peft/layers_to_transform";
constexpr double kVsTransformers = 1e-4;

nlohmann::json meta() {
  std::ifstream in(kDir + "/meta.json");
  return nlohmann::json::parse(in);
}

TEST(PeftLayers, ReadsTheOptionsAndAdaptsWhatPeftAdapts) {
  const io::PeftAdapter a = io::read_peft_adapter(kDir + "/adapter");
  EXPECT_EQ(a.spec.layers_to_transform, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(a.spec.layers_pattern, (std::vector<std::string>{"layers"}));
  EXPECT_EQ(a.spec.exclude_modules,
            (std::vector<std::string>{"model.layers.2.mlp.up_proj", "o_proj"}));

  const auto peft = meta().at("peft_adapted_modules").get<std::vector<std::string>>();
  ASSERT_EQ(peft.size(), 11u);
  std::vector<std::string> read;
  for (const io::LoraTensorPair& p : a.pairs) read.push_back(p.module);
  EXPECT_EQ(read, peft);  // both sorted by name

  // Every projection of the model, the ones without tensors included: medtune's rule says
  // "adapted" exactly where PEFT put a LoRA layer.
  const ModelConfig c = io::open_checkpoint(kDir + "/base").config;
  ASSERT_EQ(c.num_hidden_layers, 3);
  int adapted = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int p = 0; p < model::kNumProj; ++p) {
      const std::string m = model::proj_module_path(l, static_cast<model::Proj>(p));
      const bool in_peft = std::ranges::find(peft, m) != peft.end();
      EXPECT_EQ(io::peft_adapts_module(a.spec, m), in_peft) << m;
      adapted += in_peft;
    }
  EXPECT_EQ(adapted, 11);
}

TEST(PeftLayers, LogitsMatchPeft) {
  const auto ref = io::read_safetensors(kDir + "/reference.safetensors");
  const auto ids64 = tensor_to_i64(ref.tensors.at("input_ids"));
  const auto base_ref = tensor_to_f64(ref.tensors.at("base_logits_f64"));
  const auto lora_ref = tensor_to_f64(ref.tensors.at("lora_logits_f64"));

  model::LlamaModel m(io::open_checkpoint(kDir + "/base"));
  const model::Batch batch{
      1, static_cast<int64_t>(ids64.size()), std::vector<int32_t>(ids64.begin(), ids64.end()), {}};
  const auto base = m.logits(batch);
  ASSERT_EQ(base.size(), base_ref.size());
  EXPECT_LE(testing::max_rel(base, base_ref), kVsTransformers) << "base logits";

  const std::string adapter_dir = kDir + "/adapter";
  auto lora = model::lora_from_peft(io::read_peft_adapter(adapter_dir), m.config(), adapter_dir);
  m.set_lora(&lora);
  const auto adapted = m.logits(batch);
  m.set_lora(nullptr);
  ASSERT_EQ(adapted.size(), lora_ref.size());
  const double err = testing::max_rel(adapted, lora_ref);
  // Reported in --gtest_output=xml.
  RecordProperty("lora_logits_max_rel_error", ::testing::PrintToString(err));
  EXPECT_LE(err, kVsTransformers) << "base + adapter logits";
  // The comparison means something: the adapter moves the logits far more than the tolerance.
  EXPECT_GT(testing::max_rel(base, lora_ref), 100 * kVsTransformers);
}

}  // namespace
}  // namespace medtune
