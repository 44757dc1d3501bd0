// Training data: truncation, batch layout and masking, the validation split, per-epoch shuffling.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "train/batcher.h"
#include "train/data.h"
#include "support/scratch_dir.h"

namespace medtune::train {
namespace {

Example make_example(int64_t nctx, int64_t nans, int32_t base = 10) {
  Example ex;
  for (int64_t i = 0; i < nctx; ++i) ex.context.push_back(base + static_cast<int32_t>(i));
  for (int64_t i = 0; i < nans; ++i) ex.answer.push_back(base + 50 + static_cast<int32_t>(i));
  ex.source = "train.jsonl:7";
  return ex;
}

TEST(TrainData, TruncateLeftKeepsTheEndOfTheContextAndTheWholeAnswer) {
  Example ex = make_example(10, 3);
  // sequence_len 8 holds 9 tokens of text: 6 context + 3 answer.
  EXPECT_EQ(truncate_left(ex, 8), 4);
  EXPECT_EQ(ex.context, (std::vector<int32_t>{14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(ex.answer, (std::vector<int32_t>{60, 61, 62}));
  EXPECT_EQ(truncate_left(ex, 8), 0);  // already fits
}

TEST(TrainData, AnswerLongerThanSequenceLenNamesTheLine) {
  Example ex = make_example(2, 9);
  try {
    truncate_left(ex, 8);  // 9 answer tokens + at least 1 context token > 9
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("train.jsonl:7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sequence_len"), std::string::npos) << e.what();
  }
}

TEST(TrainData, BatchIsRightPaddedWithCompletionOnlyTargets) {
  std::vector<Example> ex = {make_example(3, 2, 10), make_example(2, 1, 20)};
  const auto b = make_batch(ex, {0, 1}, /*train_on_inputs=*/false, /*pad_id=*/0);
  ASSERT_EQ(b.B, 2);
  ASSERT_EQ(b.T, 4);  // longest row has 5 tokens: 4 inputs
  // Row 0: tokens 10 11 12 | 60 61 -> inputs 10 11 12 60, targets -100 -100 60 61.
  EXPECT_EQ(std::vector<int32_t>(b.ids.begin(), b.ids.begin() + 4), (std::vector<int32_t>{10, 11, 12, 60}));
  EXPECT_EQ(std::vector<int64_t>(b.targets.begin(), b.targets.begin() + 4), (std::vector<int64_t>{-100, -100, 60, 61}));
  EXPECT_EQ(std::vector<uint8_t>(b.mask.begin(), b.mask.begin() + 4), (std::vector<uint8_t>{1, 1, 1, 1}));
  // Row 1: tokens 20 21 | 70 -> inputs 20 21, targets -100 70, then padding.
  EXPECT_EQ(std::vector<int32_t>(b.ids.begin() + 4, b.ids.end()), (std::vector<int32_t>{20, 21, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(b.targets.begin() + 4, b.targets.end()), (std::vector<int64_t>{-100, 70, -100, -100}));
  EXPECT_EQ(std::vector<uint8_t>(b.mask.begin() + 4, b.mask.end()), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(count_targets(b), 3);
}

TEST(TrainData, TrainOnInputsTargetsEveryNextToken) {
  std::vector<Example> ex = {make_example(3, 2, 10)};
  const auto b = make_batch(ex, {0}, /*train_on_inputs=*/true, 0);
  EXPECT_EQ(b.targets, (std::vector<int64_t>{11, 12, 60, 61}));
}

TEST(TrainData, FisherYatesIsPinned) {
  // mt19937_64 is fully specified by the standard and the draw is ours: this order must never
  // change across compilers or standard libraries (runs are reproducible from the seed).
  std::vector<int64_t> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::mt19937_64 rng(42);
  fisher_yates(v, rng);
  std::vector<int64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(v, (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
}

TEST(TrainData, EpochPlanIsDeterministicPerSeedAndEpoch) {
  std::vector<int64_t> lengths(23, 5);
  BatchPlanOptions opt{4, false, 7};
  const auto a = plan_epoch(lengths, opt, 0);
  EXPECT_EQ(a, plan_epoch(lengths, opt, 0));
  EXPECT_NE(a, plan_epoch(lengths, opt, 1));
  opt.seed = 8;
  EXPECT_NE(a, plan_epoch(lengths, opt, 0));
  ASSERT_EQ(a.size(), 6u);  // 5 full batches and one of 3
  EXPECT_EQ(a.back().size(), 3u);
  std::set<int64_t> seen;
  for (const auto& b : a) seen.insert(b.begin(), b.end());
  EXPECT_EQ(seen.size(), 23u);
}

TEST(TrainData, GroupByLengthPutsSimilarLengthsTogether) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 40; ++i) lengths.push_back((i * 37) % 101);
  const BatchPlanOptions opt{4, true, 3};
  const auto plan = plan_epoch(lengths, opt, 0);
  ASSERT_EQ(plan.size(), 10u);
  std::set<int64_t> seen;
  // One window (40 < 200) sorted by length: each batch is a contiguous run of the sorted lengths,
  // so batches do not overlap in length range.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& b : plan) {
    int64_t lo = 1000, hi = -1;
    for (int64_t i : b) {
      seen.insert(i);
      lo = std::min(lo, lengths[static_cast<size_t>(i)]);
      hi = std::max(hi, lengths[static_cast<size_t>(i)]);
    }
    ranges.emplace_back(lo, hi);
  }
  EXPECT_EQ(seen.size(), 40u);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  // The batches themselves are shuffled: not in descending length order.
  bool descending = true;
  for (size_t i = 1; i < plan.size(); ++i)
    descending = descending && lengths[static_cast<size_t>(plan[i - 1][0])] >= lengths[static_cast<size_t>(plan[i][0])];
  EXPECT_FALSE(descending);
  EXPECT_EQ(plan, plan_epoch(lengths, opt, 0));
}

TEST(TrainData, ValidationSplitIsDeterministicAndDisjoint) {
  const auto a = split_validation(100, 0.1, 0, 42);
  EXPECT_EQ(a.val.size(), 10u);
  EXPECT_EQ(a.train.size(), 90u);
  const auto b = split_validation(100, 0.1, 0, 42);
  EXPECT_EQ(a.val, b.val);
  EXPECT_NE(a.val, split_validation(100, 0.1, 0, 43).val);
  std::set<int64_t> all(a.train.begin(), a.train.end());
  all.insert(a.val.begin(), a.val.end());
  EXPECT_EQ(all.size(), 100u);
  EXPECT_TRUE(std::is_sorted(a.val.begin(), a.val.end()));
  EXPECT_EQ(split_validation(100, 0, 7, 42).val.size(), 7u);
  EXPECT_EQ(split_validation(100, 0, 0, 42).train.size(), 100u);
  EXPECT_THROW(split_validation(5, 0, 5, 42), BadInput);
}

TEST(TrainData, ChatExampleTargetsTheLastAssistantTurn) {
  ChatRecord rec{{{"system", "S"}, {"user", "Q?"}, {"assistant", "Yes."}}, "chat.jsonl:3"};
  auto apply = [](const std::vector<tokenizer::ChatMessage>& m, bool gen) {
    std::string s;
    for (const auto& x : m) s += "<" + x.role + ">" + x.content + "<end>";
    if (gen) s += "<assistant>";
    return s;
  };
  auto encode = [](const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  };
  const Example ex = chat_example(rec, apply, encode);
  const std::string answer(ex.answer.begin(), ex.answer.end());
  EXPECT_EQ(answer, "Yes.<end>");  // the end-of-turn is learned too
  EXPECT_EQ(ex.context.size(), std::string("<system>S<end><user>Q?<end><assistant>").size());
}

TEST(TrainData, ChatJsonlErrorsNameTheLine) {
  const auto path = (medtune::testing::scratch_dir("chat") / "bad.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})" << "\n"
        << R"({"messages":[{"role":"user","content":"a"}]})" << "\n";
  }
  try {
    read_chat_jsonl(path);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// skip_invalid: the bad records (a conversation without an answer, a line that is not JSON) are
// left out and their messages kept, in file order; the good ones are read as without it.
TEST(TrainData, ChatJsonlSkipsAndCountsBadRecords) {
  const auto path = (medtune::testing::scratch_dir("chat") / "skip.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})" << "\n"
        << R"({"messages":[{"role":"user","content":"a"}]})" << "\n"
        << "{not json\n"
        << R"({"messages":[{"role":"user","content":"c"},{"role":"assistant","content":"d"}]})" << "\n";
  }
  std::vector<std::string> skipped;
  const auto records = read_chat_jsonl(path, &skipped);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].messages[1].content, "d");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("skip.jsonl:2"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("skip.jsonl:3"), std::string::npos) << skipped[1];
  EXPECT_THROW(read_chat_jsonl(path), BadInput);
  std::filesystem::remove(path);
}

// A number beyond a double is an out_of_range in nlohmann, not a parse_error: it must still be a
// BadInput naming the line and the field. Found by fuzz/fuzz_chat_jsonl.
TEST(TrainData, ChatJsonlNumberBeyondADoubleIsBadInput) {
  const auto path = (medtune::testing::scratch_dir("chat") / "huge.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})"
        << "\n"
        << R"({"messages":[{"role":"user","content":1e999}]})"
        << "\n";
  }
  try {
    read_chat_jsonl(path);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(
        std::string(e.what()).find("huge.jsonl:2: field 'content' is out of range"),
        std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace medtune::train
