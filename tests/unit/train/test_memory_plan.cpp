// The training memory plan (train/memory_plan.h): planned from shapes alone, equal to what the
// allocated adapter holds, and a plan beyond the available memory refused with its numbers.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/array.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/lora.h"
#include "model/llama.h"
#include "model/lora_flat.h"
#include "model/train_step.h"
#include "model/weights.h"
#include "ops/linear.h"
#include "train/memory_plan.h"
#include "unit/model/simulated_device.h"

namespace medtune::train {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

TrainConfig config() {
  TrainConfig cfg;
  cfg.base_model = kFixture;
  cfg.lora_r = 8;
  cfg.micro_batch_size = 4;
  cfg.sequence_len = 64;
  cfg.num_threads = 1;
  return cfg;
}

// config() on a device, micro-batches of B rows of T tokens.
TrainConfig device_config(int64_t B, int64_t T) {
  TrainConfig cfg = config();
  cfg.device = "gpu";
  cfg.micro_batch_size = B;
  cfg.sequence_len = T;
  return cfg;
}

// B rows of T ids, every position a target (the loss head's chunk as planned).
model::TrainBatch every_token_batch(int64_t B, int64_t T) {
  model::TrainBatch b;
  b.B = B;
  b.T = T;
  for (int64_t i = 0; i < B * T; ++i) {
    b.ids.push_back(static_cast<int32_t>(i + 1));
    b.targets.push_back(i + 2);
  }
  return b;
}

TEST(MemoryPlan, ShapesAloneGiveTheAllocatedParameterCount) {
  const auto ck = io::open_checkpoint(kFixture);
  const auto cfg = config();
  const auto shapes = model::lora_shapes(ck.config, lora_config(cfg));
  const auto real = model::init_lora(ck.config, lora_config(cfg), 1);
  EXPECT_EQ(shapes.num_parameters(), real.num_parameters());
  EXPECT_GT(shapes.num_parameters(), 0);
  for (const auto& layer : shapes.layers)
    for (const auto& ll : layer) EXPECT_TRUE(ll.A.empty() && ll.B.empty());
  const MemoryPlan m = plan_memory(cfg, ck.config, shapes, 1000, 0);
  EXPECT_EQ(m.params, 4.0 * static_cast<double>(real.num_parameters()));
  EXPECT_EQ(m.total(), 1000 + m.owned());
  EXPECT_NE(format_memory_plan(cfg, m).find("LoRA parameters"), std::string::npos);
}

// The base's bf16 copy: its size from the checkpoint (the block linears and the lm_head not bound
// as BF16: what model::keep_bf16_copies allocates), and settle_bf16_copy keeping it only at
// precision bf16 on a CPU with native bf16; there bf16_weight_copy true keeps it, false does
// not, auto where the run with it plans at most half of the available memory.
TEST(MemoryPlan, Bf16CopyOfTheBaseIsSizedAndSettled) {
  auto ck = io::open_checkpoint(kFixture);
  const int64_t elements = model::bf16_copy_elements(ck, model::WeightQuant::kNone);
  // F32 on disk: all of it. Bound as BF16 (the same tensors re-typed): the lm_head and
  // linears need none, except linears quantized to NF4.
  io::Checkpoint as_bf16 = ck;
  int64_t linears = 0;
  for (auto& [name, t] : as_bf16.tensors) {
    if (name.find("_proj.weight") != std::string::npos) linears += t.numel();
    t.dtype = DType::BF16;
  }
  EXPECT_GT(linears, 0);
  EXPECT_EQ(model::bf16_copy_elements(as_bf16, model::WeightQuant::kNone), 0);
  EXPECT_EQ(model::bf16_copy_elements(as_bf16, model::WeightQuant::kNf4), linears);
  const double bytes = 2.0 * static_cast<double>(elements);

  auto cfg = config();
  const auto shapes = model::lora_shapes(ck.config, lora_config(cfg));
  MemoryPlan m = plan_memory(cfg, ck.config, shapes, 0, 0);
  EXPECT_EQ(m.bf16_copy, 0);
  settle_bf16_copy(cfg, m, bytes, 0);
  EXPECT_EQ(m.bf16_copy, 0);  // precision auto: fp32 on the CPU
  cfg.precision = "bf16";
  settle_bf16_copy(cfg, m, bytes, 0);
  if (ops::bf16_kernel() != ops::Bf16Kernel::kOneDnn) {
    EXPECT_EQ(m.bf16_copy, 0) << "no native bf16 here: the copy would not be read";
    GTEST_SKIP() << "this CPU has no native bf16 (the rest needs a kept copy)";
  }
  EXPECT_EQ(m.bf16_copy, bytes);  // unknown available memory: kept
  EXPECT_NE(format_memory_plan(cfg, m).find("bf16 copy"), std::string::npos);
  const double rest = m.owned() - bytes;
  settle_bf16_copy(cfg, m, bytes, 2 * (rest + bytes));
  EXPECT_EQ(m.bf16_copy, bytes);
  settle_bf16_copy(cfg, m, bytes, 2 * (rest + bytes) - 1);
  EXPECT_EQ(m.bf16_copy, 0);
  EXPECT_EQ(format_memory_plan(cfg, m).find("bf16 copy"), std::string::npos);
  cfg.bf16_weight_copy = "true";
  settle_bf16_copy(cfg, m, bytes, 1);
  EXPECT_EQ(m.bf16_copy, bytes);
  cfg.bf16_weight_copy = "false";
  settle_bf16_copy(cfg, m, bytes, 0);
  EXPECT_EQ(m.bf16_copy, 0);
  // What keep_bf16_copies allocates for this model, against the size.
  model::LlamaModel lm(std::move(ck));
  EXPECT_EQ(static_cast<double>(lm.keep_bf16_weight_copies()), bytes);
  EXPECT_NE(lm.weights().layers[0].q.bf16, nullptr);
  EXPECT_NE(lm.weights().lm_head.bf16, nullptr);
  EXPECT_EQ(lm.keep_bf16_weight_copies(), 0);  // kept once
}

TEST(MemoryPlan, TooLargeIsRefusedWithItsNumbers) {
  const auto ck = io::open_checkpoint(kFixture);
  auto cfg = config();
  const MemoryPlan m =
      plan_memory(cfg, ck.config, model::lora_shapes(ck.config, lora_config(cfg)), 0, 0);
  EXPECT_NO_THROW(refuse_if_too_large(cfg, m, m.owned() + 1));
  EXPECT_NO_THROW(refuse_if_too_large(cfg, m, 0));  // unknown: no check
  try {
    refuse_if_too_large(cfg, m, m.owned() / 2);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the run needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("micro_batch_size (4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradient_checkpointing"), std::string::npos) << msg;
  }
}

// On a device: what a training pass holds (the simulated device counts its blocks exactly, it
// has no cache) is within the plan's activations and keys/values, and at least 97% of them,
// with and without checkpointing and dropout, adapters on q and v (the MLP's normed input made in
// a temporary) or on every linear (kept for gate's and up's gradients); a plan beyond the
// device's free memory is refused naming it.
TEST(MemoryPlan, DevicePlanBoundsWhatAPassOnADeviceHolds) {
  static testing::SimulatedDevice devices[8];  // outlive the per-thread scratch they hold
  for (const int variant : {0, 1, 2, 3, 4, 5, 6, 7}) {
    const bool ckpt = variant % 2 == 1, dropout = variant % 4 >= 2, all_linear = variant >= 4;
    testing::SimulatedDevice& device = devices[variant];
    model::LlamaModel m(io::open_checkpoint(kFixture), model::WeightQuant::kNone, device);
    auto cfg = device_config(2, 8);
    cfg.gradient_checkpointing = ckpt;
    cfg.lora_dropout = dropout ? 0.1 : 0.0;
    if (all_linear)
      cfg.lora_target_modules = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                                 model::Proj::gate, model::Proj::up, model::Proj::down};
    const auto shapes = model::lora_shapes(m.config(), lora_config(cfg));
    const MemoryPlan plan = plan_memory(cfg, m.config(), shapes, 1000, 0);
    ASSERT_TRUE(plan.on_device);
    EXPECT_EQ(plan.shards, 1);
    EXPECT_EQ(plan.device_weights, 1000);

    auto lora = model::init_lora(m.config(), lora_config(cfg), 1);
    const model::TrainBatch b = every_token_batch(2, 8);
    model::TrainOptions opt;
    opt.gradient_checkpointing = ckpt;
    opt.dropout_seed = dropout ? 7 : 0;
    const int64_t weights = device.peak_bytes();  // the model's upload
    model::forward_backward(m, lora, b, opt);
    // Besides the weights: the adapter's A and B (resident) and the pass's gradient array.
    const double adapter = 4.0 * static_cast<double>(lora.num_parameters()) +
                           4.0 * static_cast<double>(model::LoraFlatLayout(lora).total());
    const double held = static_cast<double>(device.peak_bytes() - weights) - adapter;
    // An upper bound, and a close one (here within 800 bytes of 50-67 KB).
    const double planned = plan.device_acts + plan.kv;
    EXPECT_LE(held, planned) << "variant " << variant;
    EXPECT_GE(held, 0.97 * planned) << "variant " << variant << ": " << held << " of " << planned;

    const std::string text = format_memory_plan(cfg, plan);
    EXPECT_NE(text.find("device gpu memory plan"), std::string::npos) << text;
    EXPECT_NO_THROW(refuse_if_too_large_on_device(cfg, plan, plan.device_total() + 1));
    try {
      refuse_if_too_large_on_device(cfg, plan, plan.device_total() / 2);
      FAIL() << "no exception";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("on device gpu"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is free there"), std::string::npos) << e.what();
    }
  }
}

// max_device_memory: plan_device_passes takes the fewest passes whose plan fits the limit (a
// pass holds what a micro-batch of its rows would), a device running the batch in those passes
// (opt.device_grads as the trainer gives them: every pass adds into the same accumulators)
// holds no more than that plan, and a limit that even one-row passes exceed is refused naming
// max_device_memory.
TEST(MemoryPlan, DevicePassesFitTheLimitAndBoundWhatAPassHolds) {
  static testing::SimulatedDevice device;
  model::LlamaModel m(io::open_checkpoint(kFixture), model::WeightQuant::kNone, device);
  auto cfg = device_config(4, 8);
  cfg.gradient_checkpointing = true;
  const auto shapes = model::lora_shapes(m.config(), lora_config(cfg));
  const MemoryPlan one = plan_memory(cfg, m.config(), shapes, 1000, 0);
  EXPECT_EQ(one.device_passes, 1);
  EXPECT_EQ(one.pass_rows, 4);
  // A pass of 2 rows plans as a micro-batch of 2 rows does.
  const MemoryPlan two = plan_memory(cfg, m.config(), shapes, 1000, 0, false, 2);
  auto cfg2 = cfg;
  cfg2.micro_batch_size = 2;
  const MemoryPlan as_two_rows = plan_memory(cfg2, m.config(), shapes, 1000, 0);
  EXPECT_EQ(two.pass_rows, 2);
  EXPECT_EQ(two.device_total(), as_two_rows.device_total());
  EXPECT_LT(two.device_total(), one.device_total());
  // The fewest passes that fit: none asked, 1; just below one pass's total, 2 (3 passes of
  // ceil(4 / 3) = 2 rows plan the same); at 2 passes' total, 2; below one row's, refused.
  const auto passes_within = [&](double limit) {
    return plan_device_passes(cfg, m.config(), shapes, 1000, 0, false, limit);
  };
  EXPECT_EQ(passes_within(0).device_passes, 1);
  EXPECT_EQ(passes_within(one.device_total()).device_passes, 1);
  EXPECT_EQ(passes_within(one.device_total() - 1).device_passes, 2);
  EXPECT_EQ(passes_within(two.device_total()).device_passes, 2);
  const MemoryPlan rows1 = passes_within(1);
  EXPECT_EQ(rows1.device_passes, 4);
  cfg.max_device_memory = rows1.device_total() / 2;
  try {
    refuse_if_too_large_on_device(cfg, rows1, 0);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("in passes of 1 row(s)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_device_memory is"), std::string::npos) << e.what();
  }
  EXPECT_NE(format_memory_plan(cfg, two).find("in 2 passes of at most 2"), std::string::npos)
      << format_memory_plan(cfg, two);
  // The CPU never plans passes.
  auto cpu = cfg;
  cpu.device = "cpu";
  EXPECT_EQ(plan_device_passes(cpu, m.config(), shapes, 1000, 0, false, 1).device_passes, 1);

  auto lora = model::init_lora(m.config(), lora_config(cfg), 1);
  const model::TrainBatch b = every_token_batch(4, 8);
  model::LoraFlatLayout layout(lora);
  backend::Array<float> grads(device, static_cast<size_t>(layout.total()));
  grads.zero();
  const auto table = layout.grad_table(lora, grads.data());
  model::TrainOptions opt;
  opt.gradient_checkpointing = true;
  opt.device_passes = 2;
  opt.device_grads = &table;
  const int64_t before = device.peak_bytes();  // the model's upload and the accumulators
  model::forward_backward(m, lora, b, opt);
  const double held = static_cast<double>(device.peak_bytes() - before) -
                      4.0 * static_cast<double>(lora.num_parameters());  // A and B, resident
  EXPECT_LE(held, two.device_acts + two.kv) << held;
  EXPECT_GE(held, 0.97 * (two.device_acts + two.kv)) << held << " of " << two.device_acts + two.kv;
}

// bf16 GEMMs (the GPU's default precision) add their rounded inputs to the workspace: the weight
// chunk in bf16 and the larger of the (N, max(F, C, NH HD)) activations and the loss head's
// (min(256, N), V) logits' gradient in bf16; fp32 has neither.
TEST(MemoryPlan, DeviceWorkspaceCountsTheBf16Inputs) {
  const ModelConfig c = io::open_checkpoint(kFixture).config;
  auto cfg = device_config(2, 8);
  const auto shapes = model::lora_shapes(c, lora_config(cfg));
  cfg.precision = "fp32";
  const MemoryPlan fp32 = plan_memory(cfg, c, shapes, 1000, 0);
  cfg.precision = "auto";  // bf16 on a GPU
  const MemoryPlan bf16 = plan_memory(cfg, c, shapes, 1000, 0);
  EXPECT_EQ(bf16.device_precision, backend::Precision::kBf16);
  const double chunk = static_cast<double>(std::max(c.intermediate_size, c.vocab_size) * c.hidden_size);
  const double widest = static_cast<double>(std::max({c.intermediate_size, c.hidden_size,
                                                       c.num_attention_heads * c.head_dim}));
  const double rounded = std::max(16 * widest, 16 * static_cast<double>(c.vocab_size));
  EXPECT_EQ(bf16.device_workspace - fp32.device_workspace, 2 * chunk + 2 * rounded);
  EXPECT_NE(format_memory_plan(cfg, bf16).find("(bf16 GEMMs;"), std::string::npos) << format_memory_plan(cfg, bf16);
}

}  // namespace
}  // namespace medtune::train
