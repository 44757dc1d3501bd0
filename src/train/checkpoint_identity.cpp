#include "train/checkpoint_identity.h"

#include <algorithm>
#include <filesystem>
#include <span>

#include "core/error.h"
#include "core/sha256.h"
#include "io/provenance.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

FileHash hash_file(const std::string& path, const std::string& name) {
  const io::FileDigest d = io::digest_file(path);
  return {name, d.bytes, d.sha256};
}

void hash_ids(Sha256& h, const std::vector<int32_t>& ids) {
  // Length first, so that ([1, 2], [3]) and ([1], [2, 3]) hash differently. Little-endian hosts
  // only (x86-64, aarch64), as the rest of the I/O code.
  const auto n = static_cast<int64_t>(ids.size());
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&n), sizeof n));
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t)));
}

std::string examples_hash(const std::vector<Example>& train, const std::vector<Example>& val) {
  Sha256 h;
  for (const auto* set : {&train, &val}) {
    h.update(set == &train ? std::string_view("train") : std::string_view("val"));
    for (const Example& ex : *set) {
      hash_ids(h, ex.context);
      hash_ids(h, ex.answer);
      // Only the axolotl types have a mask; hashing it only then keeps earlier runs' identities.
      if (!ex.answer_mask.empty()) {
        h.update(std::string_view("mask"));
        h.update(std::span<const uint8_t>(ex.answer_mask.data(), ex.answer_mask.size()));
      }
    }
  }
  return h.hex();
}

nlohmann::json files_json(const std::vector<FileHash>& files) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& f : files) a.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  return a;
}

std::vector<FileHash> files_from_json(const nlohmann::json& j, const std::string& origin, const char* key) {
  if (!j.contains(key) || !j[key].is_array()) throw BadInput(origin + ": '" + key + "' missing or not a list");
  std::vector<FileHash> out;
  for (const auto& f : j[key]) {
    if (!f.is_object() || !f.contains("name") || !f.contains("bytes") || !f.contains("sha256"))
      throw BadInput(origin + ": an entry of '" + key + "' lacks name, bytes or sha256");
    out.push_back({f["name"].get<std::string>(), f["bytes"].get<int64_t>(), f["sha256"].get<std::string>()});
  }
  return out;
}

std::string short_hash(const std::string& h) { return h.substr(0, 12); }

// Differences between two lists of file hashes, by name (model files) or position (data files).
void compare_files(const std::vector<FileHash>& saved, const std::vector<FileHash>& now, const std::string& what,
                   bool by_position, std::vector<std::string>& out) {
  if (by_position) {
    if (saved.size() != now.size())
      out.push_back(what + ": " + std::to_string(saved.size()) + " file(s) in the checkpoint, " +
                    std::to_string(now.size()) + " now");
    for (size_t i = 0; i < std::min(saved.size(), now.size()); ++i)
      if (saved[i].sha256 != now[i].sha256)
        out.push_back(what + ": " + now[i].name + " has changed (sha256 " + short_hash(saved[i].sha256) + "... when " +
                      saved[i].name + " was checkpointed, " + short_hash(now[i].sha256) + "... now)");
    return;
  }
  for (const auto& s : saved) {
    const auto it = std::find_if(now.begin(), now.end(), [&](const FileHash& n) { return n.name == s.name; });
    if (it == now.end())
      out.push_back(what + ": " + s.name + " is no longer there");
    else if (it->sha256 != s.sha256)
      out.push_back(what + ": " + s.name + " has changed (sha256 " + short_hash(s.sha256) + "... in the checkpoint, " +
                    short_hash(it->sha256) + "... now)");
  }
  for (const auto& n : now)
    if (std::none_of(saved.begin(), saved.end(), [&](const FileHash& s) { return s.name == n.name; }))
      out.push_back(what + ": " + n.name + " is new");
}

}  // namespace

nlohmann::json training_relevant_config(const TrainConfig& cfg) {
  nlohmann::json j = to_json(cfg);
  for (const char* key : {"base_model", "output_dir", "save_steps", "save_total_limit", "logging_steps",
                          "report_to", "logging_dir",
                          "eval_steps", "num_threads", "device", "precision", "bf16_weight_copy",
                          "max_device_memory",
                          "max_runtime", "resume_from_checkpoint", "skip_nonfinite_steps",
                          "ddp_timeout", "ddp_reduction",  // how ranks wait and sum, not what is trained
                          "skip_invalid"})  // skipped records show in examples_sha256
    j.erase(key);
  // Datasets by type only: their content is hashed separately, and moving a file is no change.
  for (const char* key : {"datasets", "test_datasets"})
    for (auto& d : j[key]) d.erase("path");
  return j;
}

std::vector<std::string> model_file_names(const std::string& base_model) {
  std::vector<std::string> names;
  for (const auto& path : io::model_files(base_model)) names.push_back(fs::path(path).filename().string());
  return names;
}

RunIdentity compute_identity(const TrainConfig& cfg, const std::vector<Example>& train,
                             const std::vector<Example>& val) {
  RunIdentity id;
  id.config = training_relevant_config(cfg);
  id.config_sha256 = sha256_hex(id.config.dump());
  const bool dir = fs::is_directory(cfg.base_model);
  for (const auto& name : model_file_names(cfg.base_model))
    id.model_files.push_back(hash_file(dir ? (fs::path(cfg.base_model) / name).string() : cfg.base_model, name));
  for (const auto* list : {&cfg.datasets, &cfg.test_datasets})
    for (const auto& d : *list) id.data_files.push_back(hash_file(d.path, d.path));
  id.examples_sha256 = examples_hash(train, val);
  return id;
}

nlohmann::json to_json(const RunIdentity& id) {
  return {{"config_sha256", id.config_sha256},
          {"config", id.config},
          {"model_files", files_json(id.model_files)},
          {"data_files", files_json(id.data_files)},
          {"examples_sha256", id.examples_sha256}};
}

RunIdentity identity_from_json(const nlohmann::json& j, const std::string& origin) {
  RunIdentity id;
  try {
    id.config = j.at("config");
    id.config_sha256 = j.at("config_sha256").get<std::string>();
    id.examples_sha256 = j.at("examples_sha256").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(origin + ": " + e.what());
  }
  id.model_files = files_from_json(j, origin, "model_files");
  id.data_files = files_from_json(j, origin, "data_files");
  return id;
}

std::vector<std::string> identity_differences(const RunIdentity& saved, const RunIdentity& now) {
  std::vector<std::string> out;
  compare_files(saved.model_files, now.model_files, "base model", false, out);
  compare_files(saved.data_files, now.data_files, "data", true, out);
  if (saved.config_sha256 != now.config_sha256) {
    const size_t before = out.size();
    for (const auto& [key, value] : saved.config.items()) {
      if (!now.config.contains(key))
        out.push_back("config: " + key + " is no longer set (was " + value.dump() + ")");
      else if (now.config[key] != value)
        out.push_back("config: " + key + " " + value.dump() + " -> " + now.config[key].dump());
    }
    for (const auto& [key, value] : now.config.items())
      if (!saved.config.contains(key)) out.push_back("config: " + key + " is new (" + value.dump() + ")");
    if (out.size() == before) out.push_back("config: the training-relevant settings hash differently");
  }
  // Same files and settings but other token ids: the tokenizer or the prompt rendering changed.
  if (saved.examples_sha256 != now.examples_sha256 && out.empty())
    out.push_back("data: the tokenized examples differ (tokenizer or prompt rendering changed)");
  return out;
}

}  // namespace medtune::train
