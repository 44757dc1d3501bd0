// medtune's axolotl dataset types (train/dataset_formats.h) against axolotl itself: for every
// record of tests/fixtures/axolotl/masks.json (written by tools/make_axolotl_mask_fixtures.py,
// which runs axolotl's own prompt strategies with the SmolLM2 tokenizer and chat template), the
// token ids and the labels (-100 where untrained) must be equal, exactly. Here rather than in
// tests/unit/train: it needs the tokenizer and the chat template, which train/ does not link
// (as apps/medtune/cmd_train.cpp, these tests bind them together).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/dataset_formats.h"

namespace medtune::train {
namespace {

const std::string kRoot = MEDTUNE_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A dataset entry of the fixture as the YAML config would give it.
DatasetSpec spec_of(const nlohmann::json& d) {
  DatasetSpec s;
  const std::string type = d.at("type");
  s.type = type == "alpaca"       ? DatasetType::kAlpaca
           : type == "completion" ? DatasetType::kCompletion
           : type == "input_output" ? DatasetType::kInputOutput
                                    : DatasetType::kChatTemplate;
  s.field = d.value("field", "");
  s.field_messages = d.value("field_messages", "");
  if (d.contains("message_property_mappings")) {
    s.message_field_role = d["message_property_mappings"].value("role", "");
    s.message_field_content = d["message_property_mappings"].value("content", "");
  }
  if (d.contains("roles_to_train")) s.roles_to_train = d["roles_to_train"].get<std::vector<std::string>>();
  s.train_on_eos = d.value("train_on_eos", "turn");
  return s;
}

class AxolotlMasks : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = tokenizer::Tokenizer::from_tokenizer_json(kRoot + "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
    chat_.emplace(read_text(kRoot + "/tests/fixtures/chat_templates/smollm2-instruct.jinja"), "smollm2-instruct.jinja");
    codec_.encode = [this](const std::string& text, bool special) { return tok_->encode(text, special); };
    codec_.bos_id = tok_->bos_id();
    codec_.eos_id = tok_->eos_id();
    codec_.apply = [this](const std::vector<tokenizer::ChatMessage>& m, bool gen) {
      return chat_->apply(m, gen, tok_->token_piece(tok_->bos_id()), tok_->token_piece(tok_->eos_id()));
    };
  }
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::optional<tokenizer::ChatTemplate> chat_;
  TextCodec codec_;
};

TEST_F(AxolotlMasks, IdsAndLabelsEqualAxolotlsOnEveryFixtureRecord) {
  const auto fixture = nlohmann::json::parse(read_text(kRoot + "/tests/fixtures/axolotl/masks.json"));
  int64_t compared = 0;
  for (const auto& c : fixture.at("cases")) {
    const DatasetSpec spec = spec_of(c.at("dataset"));
    const FormatOptions opt{c.at("train_on_inputs").get<bool>(), c.at("sequence_len").get<int64_t>()};
    for (size_t r = 0; r < c.at("records").size(); ++r) {
      const auto& rec = c["records"][r];
      const std::string where = c.at("name").get<std::string>() + " record " + std::to_string(r);
      const auto examples = record_examples(rec.at("record"), where, spec, opt, codec_);
      ASSERT_EQ(examples.size(), rec.at("examples").size()) << where;
      for (size_t e = 0; e < examples.size(); ++e) {
        const LabelledTokens got = labelled_tokens(examples[e]);
        EXPECT_EQ(got.input_ids, rec["examples"][e].at("input_ids").get<std::vector<int32_t>>()) << where;
        EXPECT_EQ(got.labels, rec["examples"][e].at("labels").get<std::vector<int64_t>>()) << where;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 16);  // the fixture's 18 rows: a truncated file would pass vacuously
}

// medtune reads alpaca's fields under other names (field_instruction, field_input, field_output):
// a renamed record gives the fixture's ids and labels for the original.
TEST_F(AxolotlMasks, AlpacaFieldRemappingReadsTheRenamedFields) {
  const auto fixture = nlohmann::json::parse(read_text(kRoot + "/tests/fixtures/axolotl/masks.json"));
  const auto& c = fixture.at("cases").at(0);
  ASSERT_EQ(c.at("name"), "alpaca");
  const auto& rec = c["records"][1];  // the one with an input
  nlohmann::json renamed{{"q", rec["record"]["instruction"]}, {"ctx", rec["record"]["input"]},
                         {"a", rec["record"]["output"]}};
  DatasetSpec spec;
  spec.type = DatasetType::kAlpaca;
  spec.field_instruction = "q";
  spec.field_input = "ctx";
  spec.field_output = "a";
  const auto got = labelled_tokens(record_examples(renamed, "renamed", spec, {false, 512}, codec_).at(0));
  EXPECT_EQ(got.input_ids, rec["examples"][0]["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.labels, rec["examples"][0]["labels"].get<std::vector<int64_t>>());
}

// A chat_template conversation whose second assistant turn is trained too (axolotl's default
// roles_to_train: every assistant turn), unlike `type: chat`, which trains the last one only.
TEST_F(AxolotlMasks, ChatTemplateTrainsEveryAssistantTurnAndNoUserTurn) {
  const nlohmann::json rec = {{"messages",
                               {{{"role", "user"}, {"content", "A"}},
                                {{"role", "assistant"}, {"content", "first answer"}},
                                {{"role", "user"}, {"content", "B"}},
                                {{"role", "assistant"}, {"content", "second answer"}}}}};
  DatasetSpec spec;
  spec.type = DatasetType::kChatTemplate;
  const auto got = labelled_tokens(record_examples(rec, "conv", spec, {false, 512}, codec_).at(0));
  std::vector<int32_t> trained;
  for (size_t i = 0; i < got.labels.size(); ++i)
    if (got.labels[i] != -100) trained.push_back(got.input_ids[i]);
  const auto first = tok_->encode("first answer", false), second = tok_->encode("second answer", false);
  std::vector<int32_t> want(first);
  want.push_back(tok_->eos_id());
  want.insert(want.end(), second.begin(), second.end());
  want.push_back(tok_->eos_id());
  EXPECT_EQ(trained, want);
}

}  // namespace
}  // namespace medtune::train
