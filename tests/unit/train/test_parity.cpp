// The model against Hugging Face transformers' float64 reference (tests/fixtures/hf, written by
// tools/make_reference.py): logits, loss and greedy tokens, for every committed configuration.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "train/parity.h"
#include "unit/model/simulated_device.h"

namespace medtune {
namespace {

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "meta.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, BaseLogitsLossAndGreedyMatchTransformers) {
  const auto result = train::check_parity(GetParam());
  EXPECT_TRUE(result.ok) << result.report.dump(2);
  // The checks the tool reports must be the ones we think it makes.
  EXPECT_LE(result.report["base_logits_max_rel_error"].get<double>(), 1e-4);
  EXPECT_TRUE(result.report["greedy_tokens_equal"].get<bool>());
}

TEST_P(HfParity, Bf16WithinDerivedTolerances) {
  // precision bf16 on the CPU (oneDNN or widened SGEMM, ops/linear.h): forward, gradients and
  // AdamW against the float64 reference within train::bf16_tolerances (derived in parity.h).
  const int64_t layers = io::open_checkpoint(GetParam() + "/base").config.num_hidden_layers;
  const auto result = train::check_parity(GetParam(), train::bf16_tolerances(layers), backend::cpu_bf16());
  EXPECT_TRUE(result.ok) << result.report.dump(2);
  EXPECT_EQ(result.report["precision"], "bf16");
  EXPECT_EQ(result.report["training_checks_device"], "cpu");
  // bf16 must actually round: the base logits are further from the reference than fp32's ~1e-6.
  EXPECT_GT(result.report["base_logits_max_rel_error"].get<double>(), 1e-5) << result.report.dump(2);
}

TEST_P(HfParity, OnASimulatedDeviceTrainingAndAdamWRunThere) {
  // What `medtune-parity --device gpu` checks, on the simulated device (unit/model/simulated_device.h):
  // the forward, the LoRA gradients and the AdamW step computed in a device's memory
  // (train/train_state.h), at the fp32 tolerances.
  static testing::SimulatedDevice device;  // outlives the per-thread scratch it holds
  const auto result = train::check_parity(GetParam(), train::ParityTolerances{}, device);
  EXPECT_TRUE(result.ok) << result.report.dump(2);
  EXPECT_EQ(result.report["training_checks_device"], device.device().str());
  EXPECT_LE(result.report["lora_adamw_max_rel_error"].get<double>(), train::ParityTolerances{}.adamw_rel);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return std::filesystem::path(p.param).filename().string();
                         });

TEST(HfParityFixtures, AllConfigurationsArePresent) {
  // GQA and MHA, odd sizes, tied embeddings, qwen2 bias, rope theta and llama3 scaling, mistral,
  // explicit head_dim, and the classic config.json form.
  const auto dirs = fixture_dirs();
  EXPECT_GE(dirs.size(), 8u);
}

}  // namespace
}  // namespace medtune
