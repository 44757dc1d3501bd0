// LoRA weights <-> Hugging Face PEFT adapters (io/peft_adapter.h).
#pragma once

#include <string>

#include "io/peft_adapter.h"
#include "model/config.h"
#include "model/lora.h"

namespace medtune::model {

// Binds a PEFT adapter to a model: every pair must name a projection of a layer that exists,
// with the shapes the config gives. Throws BadInput naming `origin` and the module otherwise.
LoraWeights lora_from_peft(const io::PeftAdapter& adapter, const ModelConfig& c,
                           const std::string& origin);

io::PeftAdapter lora_to_peft(const LoraWeights& lora, const std::string& base_model_name);

}  // namespace medtune::model
