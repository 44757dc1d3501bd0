// axolotl's dataset types (train/dataset_formats.h) with a byte-level stand-in tokenizer: the
// per-token mask through truncation and batching, bad records naming file, line and field, and
// skip_invalid. The ids and masks against axolotl itself: tests/unit/apps/test_axolotl_masks.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/bad_input.h"
#include "train/batcher.h"
#include "train/dataset_formats.h"

namespace medtune::train {
namespace {

using medtune::testing::bad_input_message;

using nlohmann::json;

// One id per byte (the byte's value); BOS is "\x01", EOS "\x02". The template writes
// "role:content\x02\n" per message.
TextCodec byte_codec() {
  TextCodec c;
  c.encode = [](const std::string& text, bool special) {
    std::vector<int32_t> ids;
    if (special) ids.push_back(1);
    for (unsigned char ch : text) ids.push_back(ch);
    return ids;
  };
  c.bos_id = 1;
  c.eos_id = 2;
  c.apply = [](const std::vector<tokenizer::ChatMessage>& m, bool gen) {
    std::string s;
    for (const auto& msg : m) s += msg.role + ":" + msg.content + "\x02\n";
    if (gen) s += "assistant:";
    return s;
  };
  return c;
}

std::string trained_text(const Example& ex) {
  const auto lt = labelled_tokens(ex);
  std::string s;
  for (size_t i = 0; i < lt.labels.size(); ++i)
    if (lt.labels[i] != -100) s.push_back(static_cast<char>(lt.input_ids[i]));
  return s;
}

DatasetSpec spec(DatasetType t) {
  DatasetSpec s;
  s.type = t;
  return s;
}

TEST(MaskedExample, ContextIsTheUntrainedPrefixAndTheMaskCoversTheRest) {
  const Example ex = masked_example({5, 6, 7, 8, 9}, {0, 0, 1, 0, 1}, "f.jsonl:3");
  EXPECT_EQ(ex.context, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ex.answer, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(ex.answer_mask, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(ex.trained_tokens(), 2);
  // Only token 0 trained: nothing is predicted (no token precedes it).
  EXPECT_NE(bad_input_message([] {
              masked_example({5, 6}, {1, 0}, "f.jsonl:4");
            }).find("f.jsonl:4: nothing to train on"),
            std::string::npos);
}

TEST(MaskedExample, BatchTargetsFollowTheMaskAndIgnoreTrainOnInputs) {
  const std::vector<Example> ex{masked_example({5, 6, 7, 8, 9}, {0, 0, 1, 0, 1}, "a")};
  for (bool train_on_inputs : {false, true}) {
    const auto b = make_batch(ex, {0}, train_on_inputs, 0);
    ASSERT_EQ(b.T, 4);
    // inputs 5 6 7 8 predict 6 7 8 9; trained: 7 and 9.
    EXPECT_EQ(b.targets, (std::vector<int64_t>{-100, 7, -100, 9})) << train_on_inputs;
  }
  // Packed, the example's targets are the same as alone.
  const std::vector<Example> two{ex[0], masked_example({3, 4, 5}, {0, 1, 1}, "b")};
  const auto p = make_batch(two, {0, 1}, false, 0, 8);
  ASSERT_EQ(p.B, 1);
  EXPECT_EQ(std::vector<int64_t>(p.targets.begin(), p.targets.begin() + 6),
            (std::vector<int64_t>{-100, 7, -100, 9, 4, 5}));
  EXPECT_EQ(count_targets(p), 4);
}

TEST(MaskedExample, TruncationCutsContextFromTheLeftThenAnswerFromTheRight) {
  // 3 context + 6 answer tokens into sequence_len 4 (5 tokens): 2 context tokens go, keeping one
  // before the first target, then 2 answer tokens from the end.
  Example ex = masked_example({1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 0, 0, 1, 0, 1, 1, 1, 1}, "t:1");
  EXPECT_EQ(truncate_left(ex, 4), 4);
  EXPECT_EQ(ex.context, (std::vector<int32_t>{3}));
  EXPECT_EQ(ex.answer, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(ex.answer_mask, (std::vector<uint8_t>{1, 0, 1, 1}));
  // No context and only the first token trained after the cut: nothing left to predict.
  Example all = masked_example({1, 2, 3, 4}, {1, 1, 0, 0}, "t:2");
  all.answer_mask = {1, 0, 0, 1};
  EXPECT_NE(bad_input_message([&] { truncate_left(all, 2); }).find("t:2: nothing left to train on"),
            std::string::npos);
}

TEST(DatasetFormats, AlpacaUsesAxolotlsPromptWithAndWithoutInput) {
  const auto codec = byte_codec();
  const auto with = record_examples({{"instruction", "I"}, {"input", "X"}, {"output", "O"}}, "a:1",
                                    spec(DatasetType::kAlpaca), {false, 512}, codec);
  const auto lt = labelled_tokens(with.at(0));
  const std::string text(lt.input_ids.begin() + 1, lt.input_ids.end() - 1);  // BOS ... EOS
  EXPECT_EQ(text,
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\nI\n\n### Input:\nX\n\n"
            "### Response:\nO");
  EXPECT_EQ(trained_text(with.at(0)), "O\x02");
  const auto without = record_examples({{"instruction", "I"}, {"output", "O"}}, "a:2", spec(DatasetType::kAlpaca),
                                       {true, 512}, codec);
  const auto lt2 = labelled_tokens(without.at(0));
  EXPECT_EQ(std::string(lt2.input_ids.begin() + 1, lt2.input_ids.end() - 1),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nI\n\n### Response:\nO");
  EXPECT_EQ(trained_text(without.at(0)).size(), lt2.input_ids.size());  // train_on_inputs: every token
}

TEST(DatasetFormats, CompletionTrainsEverythingInPiecesOfSequenceLen) {
  DatasetSpec s = spec(DatasetType::kCompletion);
  s.field = "body";
  const auto ex = record_examples({{"body", "abcdefghij"}}, "c:1", s, {false, 4}, byte_codec());
  // BOS + 10 bytes + EOS = 12 tokens: pieces of 4.
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(labelled_tokens(ex[0]).labels, (std::vector<int64_t>{1, 'a', 'b', 'c'}));
  EXPECT_EQ(labelled_tokens(ex[2]).labels, (std::vector<int64_t>{'h', 'i', 'j', 2}));
}

TEST(DatasetFormats, InputOutputTrainsLabelledSegmentsOnlyWithoutSpecialTokens) {
  const json rec = {{"segments", {{{"text", "Q?"}, {"label", false}}, {{"text", "A."}, {"label", true}},
                                  {{"text", "!"}, {"label", false}}}}};
  const auto ex = record_examples(rec, "io:1", spec(DatasetType::kInputOutput), {false, 512}, byte_codec());
  EXPECT_EQ(labelled_tokens(ex.at(0)).input_ids, (std::vector<int32_t>{'Q', '?', 'A', '.', '!'}));
  EXPECT_EQ(trained_text(ex.at(0)), "A.");
}

TEST(DatasetFormats, ChatTemplateRolesAndEosOptions) {
  const json rec = {{"conversations",
                     {{{"from", "human"}, {"value", "u1"}}, {{"from", "gpt"}, {"value", "a1"}},
                      {{"from", "human"}, {"value", "u2"}}, {{"from", "gpt"}, {"value", "a2"}}}}};
  DatasetSpec s = spec(DatasetType::kChatTemplate);
  const auto codec = byte_codec();
  EXPECT_EQ(trained_text(record_examples(rec, "ct:1", s, {false, 512}, codec).at(0)), "a1\x02" "a2\x02");
  s.train_on_eos = "none";
  EXPECT_EQ(trained_text(record_examples(rec, "ct:1", s, {false, 512}, codec).at(0)), "a1a2");
  s.train_on_eos = "last";
  EXPECT_EQ(trained_text(record_examples(rec, "ct:1", s, {false, 512}, codec).at(0)), "a1a2\x02");
  s.train_on_eos = "all";
  s.roles_to_train = {"human"};  // mapped like the messages: user
  EXPECT_EQ(trained_text(record_examples(rec, "ct:1", s, {false, 512}, codec).at(0)), "u1\x02\x02u2\x02\x02");
}

TEST(DatasetFormats, BadRecordsNameTheLineAndTheField) {
  const auto codec = byte_codec();
  const FormatOptions opt{false, 512};
  const auto msg = [&](DatasetType t, const json& rec) {
    return bad_input_message([&] { record_examples(rec, "d.jsonl:7", spec(t), opt, codec); });
  };
  EXPECT_EQ(msg(DatasetType::kAlpaca, {{"instruction", "I"}}), "d.jsonl:7: field 'output' is missing");
  EXPECT_EQ(msg(DatasetType::kAlpaca, {{"instruction", 3}, {"output", "O"}}),
            "d.jsonl:7: field 'instruction' must be a string, got a number");
  EXPECT_EQ(msg(DatasetType::kCompletion, json::array()), "d.jsonl:7: a record must be a JSON object, got a list");
  EXPECT_EQ(msg(DatasetType::kInputOutput, {{"segments", {{{"text", "x"}, {"label", "yes"}}}}}),
            "d.jsonl:7: segments[0]: field 'label' must be true or false, got a string");
  EXPECT_EQ(msg(DatasetType::kInputOutput, {{"segments", {{{"text", "x"}, {"label", false}}}}}),
            "d.jsonl:7: nothing to train on (no token of the record after the first is a target)");
  EXPECT_EQ(msg(DatasetType::kChatTemplate, {{"messages", json::array()}}),
            "d.jsonl:7: field 'messages' is an empty conversation");
  EXPECT_EQ(msg(DatasetType::kChatTemplate, {{"messages", {{{"role", "doctor"}, {"content", "x"}}}}}),
            "d.jsonl:7: field 'messages[0].role': unknown role 'doctor' (known: system, user, assistant, tool, "
            "and ShareGPT's human, gpt)");
  EXPECT_EQ(msg(DatasetType::kChatTemplate, {{"messages", {{{"role", "user"}, {"content", "only a question"}}}}}),
            "d.jsonl:7: nothing to train on (no token of the record after the first is a target)");
  EXPECT_EQ(msg(DatasetType::kChatTemplate, {{"text", "x"}}), "d.jsonl:7: field 'messages' is missing");
}

class DatasetFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("medtune_formats_" + std::to_string(::getpid()) + ".jsonl")).string();
    std::ofstream(path_) << R"({"instruction": "I", "output": "O"})" << "\n"
                         << "not json\n"
                         << "\n"
                         << R"({"instruction": "I"})" << "\n"
                         << R"({"instruction": "J", "output": "P"})" << "\n";
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(DatasetFile, AnInvalidRecordStopsTheRunUnlessSkipInvalidCountsIt) {
  DatasetSpec s = spec(DatasetType::kAlpaca);
  s.path = path_;
  const std::string m = bad_input_message([&] {
    read_axolotl_dataset(s, {false, 512}, byte_codec(), false);
  });
  EXPECT_EQ(m.rfind(path_ + ":2: not valid JSON", 0), 0u) << m;
  const DatasetLoad load = read_axolotl_dataset(s, {false, 512}, byte_codec(), true);
  EXPECT_EQ(load.examples.size(), 2u);
  EXPECT_EQ(load.skipped, 2);
  EXPECT_EQ(load.first_skipped.rfind(path_ + ":2:", 0), 0u) << load.first_skipped;
  EXPECT_EQ(load.examples[1].source, path_ + ":5");
}

}  // namespace
}  // namespace medtune::train
