// model::generate's GenerateStats: why generation stopped and how many passes of each kind ran
// (the numbers `medtune generate --json` reports), on the tiny GQA fixture.
#include <gtest/gtest.h>

#include <string>

#include "io/checkpoint.h"
#include "model/generate.h"
#include "model/llama.h"

using namespace medtune;

namespace {

const std::string kBase = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/hf/llama_gqa/base";
const std::vector<int32_t> kPrompt{3, 17, 5};

}  // namespace

TEST(GenerateStats, LengthLimitCountsOnePromptPassAndOneDecodePassPerLaterToken) {
  model::LlamaModel m(io::open_checkpoint(kBase));
  model::GenerateOptions opt;
  opt.max_new_tokens = 5;
  model::GenerateStats st;
  const auto out = model::generate(m, kPrompt, opt, {}, &st);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(st.stop, model::StopReason::kLength);
  EXPECT_EQ(st.prompt_tokens, 3);
  EXPECT_EQ(st.new_tokens, 5);
  EXPECT_EQ(st.decode_passes, 4);  // the first token comes from the prompt pass
  EXPECT_GT(st.prompt_seconds, 0.0);
  EXPECT_GE(st.first_token_seconds, st.prompt_seconds);
  EXPECT_GT(st.decode_seconds, 0.0);
}

TEST(GenerateStats, StopTokenEndsAfterItAndIsReturned) {
  model::LlamaModel m(io::open_checkpoint(kBase));
  model::GenerateOptions opt;
  opt.max_new_tokens = 6;
  const auto free_run = model::generate(m, kPrompt, opt);
  ASSERT_EQ(free_run.size(), 6u);
  // Make the third greedy token a stop token; it must be the first occurrence for the count below.
  const int32_t stop = free_run[2];
  ASSERT_NE(free_run[0], stop);
  ASSERT_NE(free_run[1], stop);
  opt.stop_ids = {stop};
  model::GenerateStats st;
  const auto out = model::generate(m, kPrompt, opt, {}, &st);
  EXPECT_EQ(out, std::vector<int32_t>(free_run.begin(), free_run.begin() + 3));
  EXPECT_EQ(st.stop, model::StopReason::kStopToken);
  EXPECT_EQ(st.new_tokens, 3);
  EXPECT_EQ(st.decode_passes, 2);
  EXPECT_EQ(model::stop_reason_name(st.stop), "stop_token");
}

TEST(GenerateStats, CallerStopIsReported) {
  model::LlamaModel m(io::open_checkpoint(kBase));
  model::GenerateOptions opt;
  opt.max_new_tokens = 6;
  int calls = 0;
  model::GenerateStats st;
  const auto out = model::generate(m, kPrompt, opt, [&](int32_t) { return ++calls < 2; }, &st);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(st.stop, model::StopReason::kCaller);
  EXPECT_EQ(st.decode_passes, 1);
}
