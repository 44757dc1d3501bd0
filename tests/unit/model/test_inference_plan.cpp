// model/inference_plan.h against what passes on a device hold: the simulated device
// (simulated_device.h) counts every byte it hands out, resident weights included, so the plan's
// parts (all but the GPU backend's own workspace, which the simulated device does not have) must
// add up to its peak exactly for LlamaModel::forward, with and without an adapter, and bound
// forward_ragged's (the server's pass, whose layer buffers are fewer).
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/inference_plan.h"
#include "model/llama.h"
#include "model/weights.h"
#include "unit/model/simulated_device.h"

namespace medtune::model {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

double stored_weight_bytes() {
  const WeightBytes w = planned_weight_bytes(io::open_checkpoint(kFixture), WeightQuant::kNone);
  return static_cast<double>(w.mapped + w.quantized);
}

Batch batch(int64_t B, int64_t T) {
  Batch b{B, T, {}, {}};
  for (int64_t i = 0; i < B * T; ++i) b.ids.push_back(static_cast<int32_t>(1 + (i * 7) % 90));
  b.mask.assign(static_cast<size_t>(B * T), 1);
  b.mask.back() = 0;  // one padding position
  return b;
}

LoraWeights adapter(const ModelConfig& c) {
  LoraConfig lc;
  lc.r = 3;
  lc.alpha = 6;
  lc.targets = {Proj::q, Proj::k, Proj::v, Proj::o, Proj::gate, Proj::up, Proj::down};
  LoraWeights lora = init_lora(c, lc, 5);
  lora.at(1, Proj::up).r = 0;  // layers and groups of different ranks: the largest counts
  lora.at(1, Proj::up).A.clear();
  lora.at(1, Proj::up).B.clear();
  lora.at(1, Proj::up).dA.clear();
  lora.at(1, Proj::up).dB.clear();
  return lora;
}


// --precision auto's question of a base: every block linear with an int8 kernel, once bound.
TEST(BlockLinearsTakeInt8, EveryBlockLinearAndOnlyThoseCount) {
  io::Checkpoint ckpt = io::open_checkpoint(kFixture);  // F32 throughout
  EXPECT_FALSE(block_linears_take_int8(ckpt, WeightQuant::kNone));
  EXPECT_TRUE(block_linears_take_int8(ckpt, WeightQuant::kNf4));  // bound as DType::NF4
  // Only the dtype the check reads is changed; nothing is bound from this checkpoint.
  std::string one;
  for (auto& [name, t] : ckpt.tensors)
    if (name.find("_proj.weight") != std::string::npos) {
      t.dtype = DType::Q4_1;
      one = name;
    }
  ASSERT_FALSE(one.empty());
  EXPECT_TRUE(block_linears_take_int8(ckpt, WeightQuant::kNone));  // embeddings and norms stay F32
  ckpt.tensors.at(one).dtype = DType::F16;
  EXPECT_FALSE(block_linears_take_int8(ckpt, WeightQuant::kNone)) << one;
}
TEST(InferencePlan, ForwardOnADeviceHoldsWhatThePlanSays) {
  for (const bool with_lora : {false, true}) {
    SCOPED_TRACE(with_lora ? "with an adapter" : "base model");
    static testing::SimulatedDevice devices[2];  // outlive the thread's layer scratch on them
    testing::SimulatedDevice& dev = devices[with_lora ? 1 : 0];
    LlamaModel m(io::open_checkpoint(kFixture), WeightQuant::kNone, dev);
    LoraWeights lora = adapter(m.config());
    if (with_lora) m.set_lora(&lora);
    const InferenceShape s{3, 9, 3 * 7, 4};  // a cache of 3 x 9, one pass of 3 x 7, 4 logit rows
    {
      KvCache cache = m.make_cache(s.cache_rows, s.cache_len);
      std::vector<float> logits;
      m.forward(batch(3, 7), cache, logits, {0, 5, 6, 20});
      ASSERT_EQ(logits.size(), static_cast<size_t>(4 * m.config().vocab_size));
    }
    const InferencePlan plan =
        plan_inference(m.config(), stored_weight_bytes(), with_lora ? &lora : nullptr, s,
                       backend::Precision::kFp32);
    EXPECT_EQ(static_cast<double>(dev.peak_bytes()), plan.total() - plan.workspace)
        << format_inference_plan(plan, "gpu", s);
    EXPECT_GT(plan.kv, 0);
    EXPECT_EQ(plan.adapter > 0, with_lora);
  }
}

// The server's pass (forward_ragged) holds fewer layer buffers than forward: the plan bounds it.
TEST(InferencePlan, RaggedForwardStaysWithinThePlan) {
  static testing::SimulatedDevice dev;
  LlamaModel m(io::open_checkpoint(kFixture), WeightQuant::kNone, dev);
  const InferenceShape s{2, 16, 10, 2};
  {
    KvCache cache = m.make_cache(s.cache_rows, s.cache_len);
    RaggedBatch b;
    for (int64_t i = 0; i < 10; ++i) {
      b.ids.push_back(static_cast<int32_t>(3 + i));
      b.slots.push_back(i < 6 ? 0 : 1);
      b.positions.push_back(i < 6 ? i : i - 6);
    }
    b.logit_rows = {5, 9};
    std::vector<float> logits;
    m.forward_ragged(b, cache, logits);
  }
  const InferencePlan plan =
      plan_inference(m.config(), stored_weight_bytes(), nullptr, s, backend::Precision::kFp32);
  EXPECT_LE(static_cast<double>(dev.peak_bytes()), plan.total() - plan.workspace);
  EXPECT_GE(static_cast<double>(dev.peak_bytes()), plan.weights + plan.kv + plan.logits);
}

TEST(InferencePlan, TooLargeIsRefusedWithItsNumbers) {
  const ModelConfig c = io::open_checkpoint(kFixture).config;
  const InferenceShape s{1, 4096, 4096, 4096};
  const InferencePlan plan = plan_inference(c, 1e6, nullptr, s, backend::Precision::kBf16);
  EXPECT_GT(plan.workspace,
            plan_inference(c, 1e6, nullptr, s, backend::Precision::kFp32).workspace);
  EXPECT_NO_THROW(
      refuse_if_inference_too_large(plan, "evaluating", "gpu:0", plan.total() + 1, 0, "x"));
  EXPECT_NO_THROW(
      refuse_if_inference_too_large(plan, "evaluating", "gpu:0", 0, 0, "x"));  // unknown
  // The weights loaded already count in the plan, not against what is free.
  EXPECT_NO_THROW(
      refuse_if_inference_too_large(plan, "evaluating", "gpu:0", plan.total() - 1e6, 1e6, "x"));
  EXPECT_THROW(
      refuse_if_inference_too_large(plan, "evaluating", "gpu:0", plan.total() - 1e6 - 1, 1e6, "x"),
      BadInput);
  try {
    refuse_if_inference_too_large(plan, "evaluating", "gpu:0", plan.total() / 2, 1e6,
                                  "--batch-tokens");
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    for (const char* part :
         {"evaluating needs", "on device gpu:0", "keys/values", "logits", "is free there",
          "besides the 1.0 MiB loaded already", "lower --batch-tokens"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
}

}  // namespace
}  // namespace medtune::model
