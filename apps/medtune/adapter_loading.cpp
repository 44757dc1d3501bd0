#include "adapter_loading.h"

#include "io/peft_adapter.h"
#include "model/lora_peft.h"

namespace medtune::cli {

std::unique_ptr<model::LoraWeights> attach_adapter(model::LlamaModel& model, const std::string& dir) {
  if (dir.empty()) return nullptr;
  auto lora = std::make_unique<model::LoraWeights>(
      model::lora_from_peft(io::read_peft_adapter(dir), model.config(), dir));
  model.set_lora(lora.get());
  return lora;
}

}  // namespace medtune::cli
