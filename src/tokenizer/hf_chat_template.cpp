#include "tokenizer/hf_chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/whole_file.h"

namespace medtune::tokenizer {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<ChatTemplateText> hf_chat_template(const std::string& model_dir) {
  const std::string jinja = (fs::path(model_dir) / "chat_template.jinja").string();
  if (fs::exists(jinja)) return ChatTemplateText{io::read_whole_file(jinja), jinja};

  const std::string config = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (!fs::exists(config)) return std::nullopt;
  const json cfg = io::read_json_file(config);
  const auto it = cfg.is_object() ? cfg.find("chat_template") : cfg.end();
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  const std::string field = config + ": chat_template";
  if (it->is_string()) return ChatTemplateText{it->get<std::string>(), field};
  if (it->is_array() && it->empty()) return std::nullopt;
  if (!it->is_array())
    throw BadInput(field + " must be a string or a list of {\"name\", \"template\"} objects, got " +
                   it->type_name());
  std::string names;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const auto name = t.is_object() ? t.find("name") : t.end();
    const auto text = t.is_object() ? t.find("template") : t.end();
    if (name == t.end() || !name->is_string() || text == t.end() || !text->is_string())
      throw BadInput(field + "[" + std::to_string(i) +
                     "] must be an object with string fields \"name\" and \"template\"");
    if (*name == "default")
      return ChatTemplateText{text->get<std::string>(), field + " (\"default\")"};
    names += (names.empty() ? "" : ", ") + name->get<std::string>();
  }
  // transformers' apply_chat_template refuses this too, unless told which template to use.
  throw BadInput(field + ": none of the templates (" + names +
                 ") is named \"default\", the one a conversation is rendered with");
}

}  // namespace medtune::tokenizer
