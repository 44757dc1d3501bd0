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

#include "train/checkpoint_identity.h"
#include "train/train_config.h"

namespace medtune::train {

inline constexpr const char* kManifestFormat = "medtune-run-manifest/1";
inline constexpr const char* kAdapterManifestKey = "medtune.manifest_inputs_sha256";

// The inputs of a run, from its identity (the model and data files were hashed once for it: GBs
// for a 7B model). The resolved config enters through the identity's training-relevant config
// hash: config_resolved.json itself also holds keys that differ between the slices of one run
// (resume_from_checkpoint, max_runtime), so it is recorded beside the inputs (config_digest).
nlohmann::json make_run_inputs(const TrainConfig& cfg, const RunIdentity& identity, int threads);

// The digest of RUN_DIR's config_resolved.json, recorded relative to the run directory; the
// manifest keeps it as "config_resolved", outside the identity.
nlohmann::json config_digest(const std::string& run_dir);

// SHA-256 of inputs.dump(): the run's identity.
std::string run_inputs_sha256(const nlohmann::json& inputs);

// UTC, ISO 8601 to the second ("2026-11-30T05:33:12Z").
std::string utc_timestamp_now();

// {"format", "inputs", "inputs_sha256", "run": {...}, "outputs": [...]}; `run` and `outputs`
// start empty and are filled as the run ends; the trainer adds "config_resolved".
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
// data), the resolved config, every output file (relative to RUN_DIR), and that the final adapter's
// metadata carries the inputs hash. Throws BadInput when RUN_DIR has no readable manifest.
// `run_status` (may be null) receives the manifest's run.status ("" when absent).
std::vector<VerifyItem> verify_run(const std::string& run_dir, std::string* run_status = nullptr);

}  // namespace medtune::train
