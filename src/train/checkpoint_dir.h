// Checkpoint directories on disk: output_dir/checkpoint-<step>/, written so that a crash, a kill
// or a full disk at any moment leaves either the complete checkpoint under its final name or
// nothing there, and verified by the SHA-256 of every file before a resume trusts it.
//
// Writing: every file goes into output_dir/.tmp-checkpoint-<step>/ (each one written and fsynced
// by io::atomic_write_file), checksums.sha256 last, then the folder is renamed to
// checkpoint-<step> and output_dir is fsynced, so the rename is durable. A checkpoint is
// therefore valid exactly when checksums.sha256 exists and every file it lists matches; a missing
// checksums file means the save never finished.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace medtune::train {

inline constexpr std::string_view kChecksumsFile = "checksums.sha256";  // `sha256sum -c` reads it
inline constexpr std::string_view kTempPrefix = ".tmp-checkpoint-";

// What a valid checkpoint must contain (besides the checksums file).
const std::vector<std::string>& checkpoint_files();

// One step of writing a checkpoint: writes the files it names into `dir` (each durably, e.g. with
// io::atomic_write_file or io::write_peft_adapter).
struct CheckpointPart {
  std::string what;  // for messages: "the adapter", "the optimizer state", ...
  std::function<void(const std::string& dir)> write;
};

// Writes output_dir/checkpoint-<step> as described above and returns its path. A checkpoint
// already under that name is replaced only once the new one is complete. On failure the temporary
// folder is removed and Internal/BadInput is thrown naming the checkpoint and the file; existing
// checkpoints are untouched. `delay_ms` > 0 sleeps that long after each part: a test-only hook
// (MEDTUNE_TEST_SAVE_DELAY_MS) that widens the window in which a kill lands mid-save.
std::string write_checkpoint_dir(const std::string& output_dir, int64_t step,
                                 const std::vector<CheckpointPart>& parts, int64_t delay_ms = 0);

// MEDTUNE_TEST_SAVE_DELAY_MS as a number of milliseconds; 0 when unset. Test-only.
int64_t save_delay_ms_from_env();

// Checks the checkpoint at `dir` against its checksums file. Empty when valid; otherwise what is
// wrong, naming the file ("checkpoint-20/optimizer.safetensors: checksum mismatch").
std::string checkpoint_problem(const std::string& dir);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

// Folders named checkpoint-<digits> in output_dir, by ascending step. No verification.
std::vector<CheckpointEntry> list_checkpoints(const std::string& output_dir);

// The newest checkpoint whose checksums verify; each newer one that does not is skipped with a
// message appended to `warnings`. nullopt when there is none.
std::optional<CheckpointEntry> newest_valid_checkpoint(const std::string& output_dir,
                                                       std::vector<std::string>& warnings);

// Removes the oldest checkpoints beyond the newest `keep` (keep <= 0: remove none). Called only
// after a new checkpoint is in place.
void prune_checkpoints(const std::string& output_dir, int64_t keep);

// Removes temporary folders that interrupted saves left in output_dir; returns their names.
std::vector<std::string> remove_interrupted_saves(const std::string& output_dir);

// "checkpoint-<step>" as a number; nullopt for any other name.
std::optional<int64_t> checkpoint_step(std::string_view folder_name);

}  // namespace medtune::train
