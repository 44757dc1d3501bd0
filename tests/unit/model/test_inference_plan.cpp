// model/inference_plan.h against what passes on a device hold: the simulated device
// (simulated_device.h) counts every byte it hands out, resident weights included, so the plan's
// parts (all but the GPU backend's own workspace, which the simulated device does not have) must
// add up to its peak exactly for LlamaModel::forward, with and without an adapter, and bound
// forward_ragged's (the server's pass, whose layer buffers are fewer).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "gpu/attention_plan.h"
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
  // llama.cpp's Q4_K_M of a model whose widths are not multiples of 256 is mostly Q5_0.
  for (const DType t : {DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q3_K, DType::IQ4_NL,
                        DType::IQ4_XS}) {
    ckpt.tensors.at(one).dtype = t;
    EXPECT_TRUE(block_linears_take_int8(ckpt, WeightQuant::kNone)) << dtype_name(t);
  }
  ckpt.tensors.at(one).dtype = DType::Q2_K;  // a min per 16 elements: no int8 kernel
  EXPECT_FALSE(block_linears_take_int8(ckpt, WeightQuant::kNone));
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

// gpu/attention_plan.h: how the GPU's GEMM attention splits a call (its kernels take as many kv
// heads per chunk as the workspace holds) and when it leaves a call to the tiled kernel.
TEST(AttentionGemmPlan, ChunksOverKvHeadsWithinTheBound) {
  constexpr int64_t MiB = int64_t{1} << 20;
  // Llama-2-7B training, 8 x 512, MHA: one kv head's scores and dP are 512 x 512 x 8 bytes.
  gpu::AttentionGemmPlan p = gpu::plan_attention_gemm(8, 512, 512, 32, 32, true);
  ASSERT_TRUE(p.use);
  EXPECT_EQ(p.per_kv_bytes, 2 * MiB);
  EXPECT_EQ(p.kv_per_chunk, 32);
  EXPECT_EQ(p.score_bytes, 64 * MiB);
  EXPECT_EQ(p.rowstat_bytes, 8 * 512 * 32 * 4);  // D: (B, T, NH) fp32
  EXPECT_EQ(gpu::kv_heads_fitting(p, p.workspace_bytes(), 32), 32);
  // The forward keeps no dP and no row statistics.
  const gpu::AttentionGemmPlan f = gpu::plan_attention_gemm(8, 512, 512, 32, 32, false);
  EXPECT_EQ(f.per_kv_bytes, MiB);
  EXPECT_EQ(f.rowstat_bytes, 0);
  // 48 heads of 1024 x 1024: 8 MiB each, 32 per chunk under 256 MiB, so two chunks (32 + 16).
  p = gpu::plan_attention_gemm(1, 1024, 1024, 48, 48, true);
  ASSERT_TRUE(p.use);
  EXPECT_EQ(p.kv_per_chunk, 32);
  EXPECT_LE(p.score_bytes, gpu::kMaxScoreBytes);
  // A smaller workspace holds fewer kv heads; below one kv head, none.
  EXPECT_EQ(gpu::kv_heads_fitting(p, p.rowstat_bytes + 2 * p.per_kv_bytes + 100, 48), 2);
  EXPECT_EQ(gpu::kv_heads_fitting(p, p.rowstat_bytes + p.per_kv_bytes - 1, 48), 0);
  // GQA: a kv head's chunk holds its group's query heads (Llama-3-8B: 4).
  p = gpu::plan_attention_gemm(1, 512, 512, 32, 8, false);
  EXPECT_EQ(p.per_kv_bytes, 4 * 512 * 512 * 4);
  EXPECT_EQ(p.kv_per_chunk, 8);
}

TEST(AttentionGemmPlan, DecodeStepsAndOverlongRowsTakeTheTiledKernel) {
  EXPECT_FALSE(gpu::plan_attention_gemm(4, 1, 300, 32, 8, false).use);  // a decode step
  EXPECT_FALSE(gpu::plan_attention_gemm(4, gpu::kMinGemmQueries - 1, 300, 32, 8, false).use);
  EXPECT_TRUE(gpu::plan_attention_gemm(4, gpu::kMinGemmQueries, 300, 32, 8, false).use);
  // One kv head of Llama-3's group of 4 at 4096 x 4096 is 512 MiB with dP: over the bound.
  EXPECT_FALSE(gpu::plan_attention_gemm(1, 4096, 4096, 32, 8, true).use);
  EXPECT_TRUE(gpu::plan_attention_gemm(1, 2048, 2048, 32, 8, true).use);
  EXPECT_FALSE(gpu::plan_attention_gemm(1, 64, 64, 6, 4, true).use);  // NH not a multiple of NKV
  EXPECT_EQ(gpu::kv_heads_fitting(gpu::plan_attention_gemm(1, 1, 8, 4, 4, false), 1 << 30, 4), 0);
}

// The device plans count that workspace: fp32's other workspace does not depend on the pass, so
// the difference between a long and a one-token pass is the attention's: the GEMM attention's
// scores for the long pass, the split-key kernel's partials for a decode step (which every plan
// includes: generation decodes after its prompt).
TEST(InferencePlan, CountsTheAttentionWorkspace) {
  const ModelConfig c = io::open_checkpoint(kFixture).config;
  const InferencePlan one = plan_inference(c, 1e6, nullptr, {2, 300, 1, 1}, backend::Precision::kFp32);
  const InferencePlan many = plan_inference(c, 1e6, nullptr, {2, 300, 600, 2}, backend::Precision::kFp32);
  const double attention =
      static_cast<double>(gpu::plan_attention_gemm(2, 300, 300, c.num_attention_heads,
                                                   c.num_key_value_heads, false)
                              .workspace_bytes());
  // 2 rows x 1 query x NH heads x (2 blocks of 256 keys) x (HD + 2) floats, rounded up to 256.
  const double split = static_cast<double>(gpu::split_attention_workspace_bytes(
      2, 1, 300, c.num_attention_heads, c.head_dim));
  EXPECT_EQ(split, static_cast<double>(gpu::round_up_256(
                       2 * 1 * c.num_attention_heads * 2 * (c.head_dim + 2) * 4)));
  EXPECT_GT(attention, split);
  // Besides the attention's: the staged index lists (24 bytes a token) and the last layer's
  // in-place row gather (4 bytes x max(C, NH HD) a logit row).
  const double staging = 24.0 * (600 - 1);
  const double gather = 4.0 * (2 - 1) * static_cast<double>(std::max(
                                            c.hidden_size, c.num_attention_heads * c.head_dim));
  EXPECT_EQ(many.workspace - one.workspace, attention - split + staging + gather);
  EXPECT_EQ(device_attention_workspace_bytes(c, 2, 300, 300, false), attention);
  EXPECT_EQ(device_attention_workspace_bytes(c, 2, 1, 300, false), split);
  EXPECT_EQ(device_attention_workspace_bytes(c, 2, 8, 300, false), 0.0);  // the tiled kernel
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
