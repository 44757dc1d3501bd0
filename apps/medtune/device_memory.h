// The memory plan of an inference command on a device (model/inference_plan.h), checked before
// its first forward pass: printed as a note, and refused (BadInput, exit 2) with its numbers when
// what the command has still to allocate is more than the device's free memory. The base weights
// count in the plan but not against the free memory: LlamaModel uploaded them when it loaded (a
// model too large for the device already stopped there, with the out-of-memory message of
// gpu_backend.cpp). The backend is told the plan (Backend::plan_memory), which bounds its buffer
// cache. No-op on the CPU, whose plan is the host's (`medtune info`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/inference_plan.h"
#include "model/llama.h"

namespace medtune::cli {

// adapters: every adapter the command may apply (none: empty); all are resident once used, and
// the one of most parameters sizes the layer's LoRA buffers. `what`: the command in words
// ("evaluating"); to_lower: the settings that shrink the plan. Returns the plan (all zeros on the
// CPU).
model::InferencePlan check_device_memory(const model::LlamaModel& model,
                                         const std::vector<const model::LoraWeights*>& adapters,
                                         const model::InferenceShape& s, const std::string& what,
                                         const std::string& to_lower, bool quiet);

}  // namespace medtune::cli
