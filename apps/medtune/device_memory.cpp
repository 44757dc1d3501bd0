#include "device_memory.h"

#include <iostream>

namespace medtune::cli {

model::InferencePlan check_device_memory(const model::LlamaModel& model,
                                         const std::vector<const model::LoraWeights*>& adapters,
                                         const model::InferenceShape& s, const std::string& what,
                                         const std::string& to_lower, bool quiet) {
  backend::Backend& be = model.backend();
  if (be.device().is_cpu()) return {};
  const model::LoraWeights* largest = nullptr;
  double adapter_bytes = 0;
  for (const model::LoraWeights* a : adapters) {
    adapter_bytes += 4.0 * static_cast<double>(a->num_parameters());
    if (largest == nullptr || a->num_parameters() > largest->num_parameters()) largest = a;
  }
  // What the backend holds now is the base weights (an adapter goes up at its first use).
  const auto weights = static_cast<double>(be.resident_bytes());
  model::InferencePlan plan =
      model::plan_inference(model.config(), weights, largest, s, be.precision());
  plan.adapter = adapter_bytes;
  if (!quiet) std::cerr << "medtune: " << model::format_inference_plan(plan, be.device().str(), s);
  model::refuse_if_inference_too_large(plan, what, be.device().str(),
                                       static_cast<double>(be.free_memory()), weights, to_lower);
  be.plan_memory(static_cast<int64_t>(plan.total()));  // the buffer cache stays within it
  return plan;
}

}  // namespace medtune::cli
