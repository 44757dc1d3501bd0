// What a training run is, by content: SHA-256 of the base model files, of each data file, of the
// tokenized examples, and of the config keys that change what is trained. A checkpoint stores this
// (identity.json) and a resume compares it with the run it is asked to continue, so that a run is
// never silently continued on another model, other data or other hyperparameters.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/data.h"
#include "train/train_config.h"

namespace medtune::train {

struct FileHash {
  std::string name;  // model files: relative to the model directory; data files: as configured
  int64_t bytes = 0;
  std::string sha256;
  bool operator==(const FileHash&) const = default;
};

struct RunIdentity {
  nlohmann::json config;      // training_relevant_config(cfg)
  std::string config_sha256;  // of config.dump()
  std::vector<FileHash> model_files;
  std::vector<FileHash> data_files;  // datasets then test_datasets, in config order
  std::string examples_sha256;       // of the tokenized train and validation examples
};

// The resolved config without the keys that may change between the slices of one run: where
// things are (base_model, dataset paths, output_dir: the model and data are identified by content),
// how often to save, log or evaluate (save_steps, save_total_limit, logging_steps, eval_steps: they
// never touch the weights), max_runtime, resume_from_checkpoint, and num_threads, device and
// precision (a resume may move to another machine; the trainer warns that bit-exactness needs the
// same thread count; another device or precision computes the same steps to rounding).
nlohmann::json training_relevant_config(const TrainConfig& cfg);

// The file names of io::model_files(base_model) (a .gguf, or an HF directory's files).
std::vector<std::string> model_file_names(const std::string& base_model);

// Hashes the model files (the slow part: GBs), the data files and the examples.
RunIdentity compute_identity(const TrainConfig& cfg, const std::vector<Example>& train,
                             const std::vector<Example>& val);

nlohmann::json to_json(const RunIdentity& id);
// Throws BadInput naming `origin` when a field is missing or has the wrong type.
RunIdentity identity_from_json(const nlohmann::json& j, const std::string& origin);

// One line per difference, saying which of base model, data and config changed and how
// ("config: learning_rate 0.0002 -> 0.0001"); empty when `saved` and `now` are the same run.
std::vector<std::string> identity_differences(const RunIdentity& saved, const RunIdentity& now);

}  // namespace medtune::train
