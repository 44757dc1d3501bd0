// The training memory plan (train/memory_plan.h): planned from shapes alone, equal to what the
// allocated adapter holds, and a plan beyond the available memory refused with its numbers.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/lora.h"
#include "train/memory_plan.h"

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

}  // namespace
}  // namespace medtune::train
