// Where a Hugging Face model directory keeps its chat template, found as transformers 5 finds it
// (PreTrainedTokenizerBase.from_pretrained): chat_template.jinja when present, which takes
// priority over tokenizer_config.json (save_pretrained writes the template there and no longer
// into the config); else tokenizer_config.json's "chat_template": a string, or the older list of
// {"name", "template"} objects, of which apply_chat_template uses the one named "default".
#pragma once

#include <optional>
#include <string>

namespace medtune::tokenizer {

struct ChatTemplateText {
  std::string text;  // the Jinja source
  // Where it came from: "DIR/chat_template.jinja" or "DIR/tokenizer_config.json: chat_template".
  std::string origin;
};

// nullopt when the directory holds no chat template. BadInput naming the file and field for a
// "chat_template" of the wrong shape, or a list of templates with none named "default".
std::optional<ChatTemplateText> hf_chat_template(const std::string& model_dir);

}  // namespace medtune::tokenizer
