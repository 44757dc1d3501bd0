// manifest.json of a training run: what the run was made from (base model files, data files,
// resolved config, all by SHA-256; medtune's version, backend, threads, seed), when it ran and
// what it produced (final metrics, the adapter files' digests).
//
// The run's identity is the SHA-256 of its "inputs" object (serialized compactly with sorted
// keys, as nlohmann::json::dump() does). That hash, not the whole file's, goes into the adapter's
// safetensors metadata (kAdapterManifestKey): the manifest also records the adapter's own digest,
// so a hash of the whole file could not be inside the adapter it describes.
//
//   medtune verify RUN_DIR   recomputes every digest and says what no longer matches.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace medtune::train {

inline constexpr const char* kManifestFormat = "medtune-run-manifest/1";
inline constexpr const char* kAdapterManifestKey = "medtune.manifest_inputs_sha256";

// The inputs of a run: hashes the base model's files (GBs for a 7B model: done once per run),
// the dataset files and `config_resolved_path` (recorded relative to cfg.output_dir).
// `config_file` is the YAML the user gave (absolute), hashed too.
nlohmann::json make_run_inputs(const TrainConfig& cfg, const std::string& config_file,
                               const std::string& config_resolved_path, int threads);

// SHA-256 of inputs.dump(): the run's identity.
std::string run_inputs_sha256(const nlohmann::json& inputs);

// UTC, ISO 8601 to the second ("2026-11-30T05:33:12Z").
std::string utc_timestamp_now();

// {"format", "inputs", "inputs_sha256", "run": {...}, "outputs": [...]}; `run` and `outputs`
// start empty and are filled as the run ends.
nlohmann::json make_run_manifest(nlohmann::json inputs);

// Written atomically to RUN_DIR/manifest.json (a crash leaves the previous version whole).
void write_run_manifest(const std::string& run_dir, const nlohmann::json& manifest);

// One check made by verify_run: `subject` is what was checked (a file, the identity hash, the
// adapter's metadata), `problem` is empty when it matches.
struct VerifyItem {
  std::string subject;
  std::string problem;
};

// Re-reads RUN_DIR/manifest.json and checks: the inputs hash, every input file (base model,
// data, configs), every output file (relative to RUN_DIR), and that the final adapter's
// metadata carries the inputs hash. Throws BadInput when RUN_DIR has no readable manifest.
std::vector<VerifyItem> verify_run(const std::string& run_dir);

}  // namespace medtune::train
