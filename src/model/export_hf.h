// `medtune export merge`: a Hugging Face model directory holding the base with a LoRA adapter
// merged in (model/merge.h), loadable by transformers' AutoModelForCausalLM.from_pretrained.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "model/lora.h"

namespace medtune::model {

struct HfExportReport {
  std::vector<std::string> written;  // file names inside the output directory
  std::vector<std::string> notes;    // what was not written and why (e.g. no tokenizer.json)
};

// Writes out_dir/{config.json, model.safetensors} and, for a Hugging Face source directory, copies
// generation_config.json and the tokenizer files it has (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, vocab.json, merges.txt, tokenizer.model, chat_template.jinja). From a
// GGUF source config.json is built from the GGUF metadata and no tokenizer file is written.
// dtype: F32, F16 or BF16. Each file is written atomically; out_dir is created if needed.
HfExportReport export_merged_hf(const io::Checkpoint& ckpt, const LoraWeights* lora,
                                const std::string& out_dir, DType dtype);

// The config.json text for `ckpt` with "dtype"/"torch_dtype" set to `dtype_name` ("float16", ...).
std::string merged_config_json(const io::Checkpoint& ckpt, const std::string& dtype_name);

}  // namespace medtune::model
