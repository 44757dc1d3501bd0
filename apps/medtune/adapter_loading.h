// --adapter DIR for the commands that run a model: a PEFT LoRA adapter bound to the model.
#pragma once

#include <memory>
#include <string>

#include "model/llama.h"
#include "model/lora.h"

namespace medtune::cli {

// Reads the adapter, checks it against the model, and applies it (model.set_lora). The returned
// weights must outlive every use of the model. Empty `dir`: no adapter, returns null.
std::unique_ptr<model::LoraWeights> attach_adapter(model::LlamaModel& model, const std::string& dir);

}  // namespace medtune::cli
