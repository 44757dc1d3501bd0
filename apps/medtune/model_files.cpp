#include "model_files.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/whole_file.h"

namespace medtune::cli {

std::unique_ptr<tokenizer::Tokenizer> open_tokenizer(const io::Checkpoint& ckpt) {
  if (ckpt.gguf) return tokenizer::Tokenizer::from_gguf(*ckpt.gguf);
  const std::string path = ckpt.path + "/tokenizer.json";
  if (!std::filesystem::exists(path))
    throw BadInput(ckpt.path + ": no tokenizer.json in the model directory");
  return tokenizer::Tokenizer::from_tokenizer_json(path);
}

ChatTemplateSource find_chat_template(const io::Checkpoint& ckpt) {
  if (ckpt.gguf) {
    if (!ckpt.gguf->has("tokenizer.chat_template"))
      throw BadInput(ckpt.path + ": the model has no chat template (metadata key 'tokenizer.chat_template')");
    return {ckpt.gguf->get_string("tokenizer.chat_template"), ckpt.path + ": tokenizer.chat_template"};
  }
  const std::string path = ckpt.path + "/tokenizer_config.json";
  if (!std::filesystem::exists(path))
    throw BadInput(ckpt.path + ": no tokenizer_config.json, so no chat template");
  const nlohmann::json j = io::read_json_file(path);
  if (!j.contains("chat_template") || !j["chat_template"].is_string())
    throw BadInput(path + ": field 'chat_template' is missing or not a string");
  return {j.at("chat_template").get<std::string>(), path + ": chat_template"};
}

}  // namespace medtune::cli
