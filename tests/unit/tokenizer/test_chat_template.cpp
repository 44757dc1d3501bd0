// Parity of ChatTemplate with transformers' apply_chat_template on real models' templates.
// Expected strings come from tools/make_chat_template_fixtures.py (transformers + jinja2).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "support/files.h"
#include "tokenizer/chat_template.h"

namespace medtune::tokenizer {
namespace {

const std::string kFixtures = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/chat_templates/";

using testing::read_file;

TEST(ChatTemplateParity, EveryCaseMatchesTransformers) {
  const auto cases = nlohmann::json::parse(read_file(kFixtures + "cases.json"));
  ASSERT_GT(cases.size(), 100U);
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  int passed = 0;
  for (const auto& c : cases) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 (c["add_generation_prompt"].get<bool>() ? " / gen" : " / no gen"));
    auto& tmpl = templates[name];
    if (!tmpl) {
      ASSERT_NO_THROW(tmpl = std::make_unique<ChatTemplate>(read_file(kFixtures + name + ".jinja"),
                                                            name + ".jinja"));
    }
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const bool gen = c["add_generation_prompt"];
    const std::string bos = c["bos_token"];
    const std::string eos = c["eos_token"];
    if (c.contains("expected")) {
      std::string got;
      try {
        got = tmpl->apply(messages, gen, bos, eos);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>());
      if (got == c["expected"].get<std::string>()) ++passed;
    } else {
      try {
        tmpl->apply(messages, gen, bos, eos);
        ADD_FAILURE() << "expected an error like: " << c["error"].get<std::string>();
      } catch (const BadInput& e) {
        ++passed;
        const std::string what = e.what();
        EXPECT_NE(what.find(name + ".jinja:"), std::string::npos) << what;
        if (c["raised_by_template"].get<bool>()) {
          // The template's own raise_exception message reaches the user unchanged.
          EXPECT_NE(what.find(c["error"].get<std::string>()), std::string::npos) << what;
        }
      }
    }
  }
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

TEST(ChatTemplateParity, Llama2RolesMustAlternate) {
  const ChatTemplate t(read_file(kFixtures + "llama-2-chat.jinja"), "model.gguf: tokenizer.chat_template");
  try {
    t.apply({{"user", "a"}, {"user", "b"}}, false, "<s>", "</s>");
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("model.gguf: tokenizer.chat_template:1:", 0), 0U) << what;
    EXPECT_NE(what.find("Conversation roles must alternate user/assistant/user/assistant/..."),
              std::string::npos)
        << what;
  }
}

TEST(ChatTemplateParity, ParsesOnceAndRendersMany) {
  const ChatTemplate t(read_file(kFixtures + "smollm2-instruct.jinja"), "smollm2");
  const std::string a = t.apply({{"user", "Hi"}}, true, "", "");
  EXPECT_EQ(a, t.apply({{"user", "Hi"}}, true, "", ""));
  EXPECT_EQ(a,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// Construction errors name origin, line and column of the offending construct.
std::string construct_error(const std::string& source) {
  try {
    ChatTemplate t(source, "model.gguf: tokenizer.chat_template");
  } catch (const BadInput& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplateErrors, UnsupportedFilterNamesLineAndColumn) {
  EXPECT_EQ(construct_error("{% for m in messages %}\n{{ m.role }}\n{{ m.content|wordwrap(10) }}\n{% endfor %}"),
            "model.gguf: tokenizer.chat_template:3:14: unsupported filter 'wordwrap'");
}

TEST(ChatTemplateErrors, UnsupportedTestAndTag) {
  EXPECT_EQ(construct_error("{{ x is escaped }}"),
            "model.gguf: tokenizer.chat_template:1:9: unsupported test 'escaped'");
  EXPECT_EQ(construct_error("a\n  {% include 'other.jinja' %}"),
            "model.gguf: tokenizer.chat_template:2:6: unsupported tag 'include'");
  EXPECT_EQ(construct_error("{% for x in xs recursive %}{% endfor %}"),
            "model.gguf: tokenizer.chat_template:1:16: unsupported loop modifier 'recursive'");
  EXPECT_EQ(construct_error("{% frobnicate %}"),
            "model.gguf: tokenizer.chat_template:1:4: unknown tag 'frobnicate'");
}

TEST(ChatTemplateErrors, SyntaxErrors) {
  EXPECT_EQ(construct_error("{% if true %}x"),
            "model.gguf: tokenizer.chat_template:1:15: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(construct_error("ab{{ x "),
            "model.gguf: tokenizer.chat_template:1:3: unexpected end of template, expected '}}' to close the tag opened here");
  EXPECT_EQ(construct_error("{{ 'abc }}"),
            "model.gguf: tokenizer.chat_template:1:4: unterminated string literal");
  EXPECT_EQ(construct_error("{# open"),
            "model.gguf: tokenizer.chat_template:1:1: missing end of comment tag '#}'");
  EXPECT_EQ(construct_error("{% endfor %}"),
            "model.gguf: tokenizer.chat_template:1:4: unexpected 'endfor' without a matching opening tag");
  EXPECT_EQ(construct_error("{{ a + }}"),
            "model.gguf: tokenizer.chat_template:1:8: expected an expression, got '}}'");
  EXPECT_EQ(construct_error("{{ (a }}"),
            "model.gguf: tokenizer.chat_template:1:7: unexpected '}'");
  EXPECT_EQ(construct_error("{% break %}"),
            "model.gguf: tokenizer.chat_template:1:4: 'break' outside of a loop");
  EXPECT_EQ(construct_error("{{ x | }}"),
            "model.gguf: tokenizer.chat_template:1:8: expected a name, got '}}'");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheConstruct) {
  const ChatTemplate t("{{ messages[0].content }}\n{{ 'x' + messages[0].nothing.deeper }}", "t");
  try {
    t.apply({{"user", "hi"}}, false, "", "");
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_STREQ(e.what(), "t:2:29: 'dict object' has no attribute 'nothing'");
  }
  const ChatTemplate m("{{ messages[0].content.format(1) }}", "t");
  EXPECT_THROW(m.apply({{"user", "hi"}}, false, "", ""), BadInput);
}

TEST(ChatTemplate, ContextMatchesTransformers) {
  const ChatTemplate t(
      "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ bos_token }}"
      "{{ eos_token }}{{ raise_exception is defined }}{{ messages | tojson }}",
      "t");
  EXPECT_EQ(t.apply({{"user", "é\"x"}}, true, "<s>", "</s>"),
            "TrueTrueTrue<s></s>True[{\"role\": \"user\", \"content\": \"é\\\"x\"}]");
}

TEST(ChatTemplate, StrftimeNowFormatsToday) {
  const ChatTemplate t("{{ strftime_now('%Y') | length }}", "t");
  EXPECT_EQ(t.apply({}, false, "", ""), "4");
}

}  // namespace
}  // namespace medtune::tokenizer
