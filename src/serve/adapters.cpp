#include "serve/adapters.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "io/peft_adapter.h"
#include "io/provenance.h"
#include "io/safetensors.h"
#include "model/lora_peft.h"
#include "train/run_manifest.h"

namespace medtune::serve {

std::shared_ptr<const Adapter> load_adapter(const model::LlamaModel& model, const std::string& name,
                                            const std::string& dir) {
  auto a = std::make_shared<Adapter>();
  a->name = name;
  a->dir = dir;
  a->weights = std::make_unique<model::LoraWeights>(
      model::lora_from_peft(io::read_peft_adapter(dir), model.config(), dir));
  const std::string weights_file = (std::filesystem::path(dir) / "adapter_model.safetensors").string();
  if (std::filesystem::is_regular_file(weights_file)) {
    a->adapter_sha256 = io::digest_file(weights_file).sha256;
    const io::SafetensorsFile st = io::read_safetensors(weights_file);
    if (const auto it = st.metadata.find(train::kAdapterManifestKey); it != st.metadata.end())
      a->manifest_sha256 = it->second;
  }
  a->created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  return a;
}

void AdapterRegistry::add(std::shared_ptr<const Adapter> adapter, const std::string& base_name) {
  std::lock_guard lock(mu_);
  if (adapter->name == base_name)
    throw BadInput("adapter name '" + adapter->name + "' is the base model's name; choose another");
  if (adapter->name.empty()) throw BadInput("an adapter needs a name (NAME=DIR)");
  if (!by_name_.emplace(adapter->name, adapter).second)
    throw BadInput("an adapter named '" + adapter->name + "' is already loaded");
}

std::shared_ptr<const Adapter> AdapterRegistry::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const Adapter>> AdapterRegistry::list() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<const Adapter>> out;
  for (const auto& [name, a] : by_name_) out.push_back(a);
  return out;
}

std::pair<std::string, std::string> parse_adapter_arg(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq != std::string::npos) {
    if (eq == 0) throw BadInput("--adapter " + arg + ": the name before '=' is empty");
    if (eq + 1 == arg.size()) throw BadInput("--adapter " + arg + ": the directory after '=' is empty");
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  std::filesystem::path p(arg);
  if (!p.has_filename()) p = p.parent_path();
  return {p.filename().string(), arg};
}

}  // namespace medtune::serve
