// Which chat template a Hugging Face directory holds, by transformers 5's rules
// (tokenization_utils_base.py, from_pretrained: "If independent chat template file(s) exist, they
// take priority over template entries in the tokenizer config"; save_pretrained writes
// chat_template.jinja and drops the config's entry; a legacy list is used by its "default").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/bad_input.h"
#include "support/scratch_dir.h"
#include "tokenizer/hf_chat_template.h"

namespace medtune::tokenizer {
namespace {

namespace fs = std::filesystem;

class HfChatTemplate : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(fs::path(dir_) / name, std::ios::binary) << text;
  }
  std::string bad_input() const {
    return medtune::testing::bad_input_message([&] { hf_chat_template(dir_); });
  }
  const std::string dir_ = medtune::testing::scratch_dir("hf_chat_template").string();
};

TEST_F(HfChatTemplate, NoneWithoutAFileOrAField) {
  EXPECT_FALSE(hf_chat_template(dir_));
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(hf_chat_template(dir_));
  write("tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_FALSE(hf_chat_template(dir_));
  write("tokenizer_config.json", R"({"chat_template": []})");
  EXPECT_FALSE(hf_chat_template(dir_));
}

TEST_F(HfChatTemplate, TheConfigsString) {
  write("tokenizer_config.json", R"({"chat_template": "{{ messages[0]['content'] }}"})");
  const auto t = hf_chat_template(dir_);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->text, "{{ messages[0]['content'] }}");
  EXPECT_EQ(t->origin, (fs::path(dir_) / "tokenizer_config.json").string() + ": chat_template");
}

TEST_F(HfChatTemplate, TheJinjaFileWinsOverTheConfig) {
  // As transformers 5 saves a tokenizer: the template in its own file, byte for byte (a trailing
  // newline is part of the template), none in the config. An older config entry beside the file
  // is ignored, as transformers ignores it.
  write("chat_template.jinja", "{{ 'new' }}\n");
  write("tokenizer_config.json", R"({"chat_template": "{{ 'old' }}"})");
  const auto t = hf_chat_template(dir_);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->text, "{{ 'new' }}\n");
  EXPECT_EQ(t->origin, (fs::path(dir_) / "chat_template.jinja").string());
  fs::remove(fs::path(dir_) / "tokenizer_config.json");
  EXPECT_EQ(hf_chat_template(dir_)->text, "{{ 'new' }}\n");
}

TEST_F(HfChatTemplate, TheDefaultOfAListOfTemplates) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                       {"name": "default", "template": "D"}]})");
  const auto t = hf_chat_template(dir_);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->text, "D");
  EXPECT_NE(t->origin.find("(\"default\")"), std::string::npos) << t->origin;
}

TEST_F(HfChatTemplate, BadShapesNameTheFieldAndTheTemplates) {
  const std::string field = (fs::path(dir_) / "tokenizer_config.json").string() + ": chat_template";
  write("tokenizer_config.json", R"({"chat_template": 7})");
  EXPECT_EQ(bad_input(),
            field + " must be a string or a list of {\"name\", \"template\"} objects, got number");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
  EXPECT_EQ(bad_input(),
            field + "[0] must be an object with string fields \"name\" and \"template\"");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "R"},
                                                       {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(bad_input(),
            field +
                ": none of the templates (rag, tool_use) is named \"default\", the one a "
                "conversation is rendered with");
  write("tokenizer_config.json", "{");
  EXPECT_NE(bad_input().find("tokenizer_config.json: not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace medtune::tokenizer
