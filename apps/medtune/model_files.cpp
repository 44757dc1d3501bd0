#include "model_files.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/hf_config.h"
#include "tokenizer/hf_chat_template.h"

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
  const auto found = tokenizer::hf_chat_template(ckpt.path);
  if (!found)
    throw BadInput(ckpt.path +
                   ": the model has no chat template (no chat_template.jinja, and no "
                   "'chat_template' in tokenizer_config.json)");
  return {found->text, found->origin};
}

std::vector<int64_t> stop_token_ids(const io::Checkpoint& ckpt, const tokenizer::Tokenizer& tok) {
  std::vector<int64_t> ids;
  const auto add = [&](int64_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (int64_t id : ckpt.config.eos_token_ids) add(id);
  // Read here, not with the checkpoint: only generating commands need it, so a broken file
  // does not stop eval or train. A GGUF carries its stop tokens (eos, eot) in its metadata.
  const std::filesystem::path generation_config =
      std::filesystem::path(ckpt.path) / "generation_config.json";
  if (!ckpt.gguf && std::filesystem::exists(generation_config))
    for (int64_t id : io::read_generation_eos_token_ids(generation_config.string())) add(id);
  if (tok.eos_id() >= 0) add(tok.eos_id());
  return ids;
}

}  // namespace medtune::cli
