// Hugging Face config.json -> ModelConfig, both the classic layout (top-level rope_theta,
// rope_scaling) and the newer one (a rope_parameters object).
#pragma once

#include <string>

#include "model/config.h"

namespace medtune::io {

// Throws BadInput "<path>: field '<name>' ..." for a missing/mistyped field or an unsupported
// architecture (model_type / architectures) or rope_scaling type.
ModelConfig read_hf_config(const std::string& config_json_path);
ModelConfig parse_hf_config(const std::string& json_text, const std::string& path_for_messages);

}  // namespace medtune::io
