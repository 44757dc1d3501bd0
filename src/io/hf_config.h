// Hugging Face config.json -> ModelConfig, both the classic layout (top-level rope_theta,
// rope_scaling) and the newer one (a rope_parameters object).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace medtune::io {

// Throws BadInput "<path>: field '<name>' ..." for a missing/mistyped field or an unsupported
// architecture (model_type / architectures) or rope_scaling type.
ModelConfig read_hf_config(const std::string& config_json_path);
ModelConfig parse_hf_config(const std::string& json_text, const std::string& path_for_messages);

// generation_config.json's eos_token_id (one id or a list; none when null or absent): the ids
// transformers' generate() stops at, which may name more than config.json's (Llama 3 Instruct:
// <|eot_id|>). Throws BadInput naming the file and field.
std::vector<int64_t> read_generation_eos_token_ids(const std::string& generation_config_path);

}  // namespace medtune::io
