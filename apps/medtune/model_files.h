// Opening what a MODEL argument names: the checkpoint, its tokenizer and its chat template,
// from a Hugging Face directory (tokenizer.json, tokenizer_config.json) or a .gguf file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace medtune::cli {

std::unique_ptr<tokenizer::Tokenizer> open_tokenizer(const io::Checkpoint& ckpt);

// The model's own chat template and where it came from ("<file>: tokenizer.chat_template").
// Throws BadInput when the model has none.
struct ChatTemplateSource {
  std::string text, origin;
};
ChatTemplateSource find_chat_template(const io::Checkpoint& ckpt);

// The tokens that end a generation, each once: config.json's eos_token_id, generation_config.json's
// (what transformers' generate() stops at; Llama 3 Instruct's <|eot_id|> may be named only there)
// and the tokenizer's eos_token.
std::vector<int64_t> stop_token_ids(const io::Checkpoint& ckpt, const tokenizer::Tokenizer& tok);

}  // namespace medtune::cli
