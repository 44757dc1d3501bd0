// The LoRA adapters a server offers, by the model name a request selects them with. An adapter is
// immutable once loaded and shared by pointer: a request holds its own reference for as long as it
// runs, so loading another adapter (POST /v1/adapters) never changes one in use.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/lora.h"

namespace medtune::serve {

struct Adapter {
  std::string name, dir;
  std::unique_ptr<model::LoraWeights> weights;
  // The training run's identity (manifest.json's inputs_sha256, which the trainer writes into the
  // adapter's safetensors metadata); empty for an adapter medtune did not train.
  std::string manifest_sha256;
  std::string adapter_sha256;  // SHA-256 of adapter_model.safetensors: the exact weights served
  int64_t created = 0;         // Unix seconds when loaded (GET /v1/models "created")
};

// Reads a PEFT adapter directory, checks it against `model`, and records its provenance.
// Throws BadInput naming the file or tensor.
std::shared_ptr<const Adapter> load_adapter(const model::LlamaModel& model, const std::string& name,
                                            const std::string& dir);

class AdapterRegistry {
 public:
  // Throws BadInput when `name` is taken (the base model's name included).
  void add(std::shared_ptr<const Adapter> adapter, const std::string& base_name);
  std::shared_ptr<const Adapter> find(const std::string& name) const;  // null when absent
  std::vector<std::shared_ptr<const Adapter>> list() const;             // by name

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Adapter>> by_name_;
};

// "NAME=DIR" of --adapter; a bare DIR is named after its last path component.
std::pair<std::string, std::string> parse_adapter_arg(const std::string& arg);

}  // namespace medtune::serve
