// Opening what a MODEL argument names: the checkpoint, its tokenizer and its chat template,
// from a Hugging Face directory (tokenizer.json, tokenizer_config.json) or a .gguf file.
#pragma once

#include <memory>
#include <string>

#include "io/checkpoint.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace medtune::cli {

std::unique_ptr<tokenizer::Tokenizer> open_tokenizer(const io::Checkpoint& ckpt);

// The model's own chat template and where it came from ("<file>: tokenizer.chat_template").
// Throws BadInput when the model has none.
struct ChatTemplateSource {
  std::string text, origin;
};
ChatTemplateSource find_chat_template(const io::Checkpoint& ckpt);

// Whether every block linear of the base (each layer's q/k/v/o and gate/up/down weights) is, after
// --base-quant, of a dtype that the int8 route computes: what `--precision auto` asks of a model
// before it picks int8 for generate and serve (backend::parse_inference_precision).
bool base_takes_int8(const io::Checkpoint& ckpt, model::WeightQuant quant);

}  // namespace medtune::cli
