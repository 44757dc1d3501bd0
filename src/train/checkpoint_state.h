// The trainer's state in a checkpoint, beyond the adapter itself: trainer_state.json (step, the
// summary so far, the data cursor, the scheduler position) and optimizer.safetensors (AdamW's
// moments and step count). Together with the adapter they are everything a resumed run needs to
// take exactly the steps the uninterrupted run would have taken.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/optimizer.h"
#include "train/trainer.h"

namespace medtune::train {

// Where the data order stands: the micro-batches of epoch `epoch` (plan_epoch(..., epoch)) of
// which the first `position` have been consumed. The plan itself is not stored: it is a pure
// function of the example lengths, the seed and the epoch; its hash is, so a resume notices when
// that function (or the data) changed and refuses instead of training on another order.
struct CursorState {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t consumed = 0;     // micro-batches consumed since step 0 (for the logged "epoch")
  std::string plan_sha256;  // of epoch `epoch`'s plan
  bool operator==(const CursorState&) const = default;
};

// SHA-256 of an epoch plan (batch sizes and example indices, as int64 little-endian).
std::string plan_sha256(const std::vector<std::vector<int64_t>>& plan);

struct TrainerState {
  int64_t step = 0;         // optimizer steps done; the next step to run is `step` (0-based)
  int64_t total_steps = 0;  // planned when the checkpoint was written
  int64_t warmup_steps = 0;
  int64_t tokens = 0;        // target tokens trained on so far
  int64_t input_tokens = 0;  // non-padding tokens run so far
  std::vector<double> losses;  // (step) mean loss of every step so far
  std::vector<EvalPoint> evals;
  CursorState cursor;
  int64_t num_threads = 0;    // OpenMP threads of the run that wrote it (bit-exactness needs the same)
  int64_t world_size = 1;     // ranks of the job that wrote it (dist/); any other count resumes
                              // the same run when the global batch is the same
  int64_t metrics_bytes = 0;  // length of metrics.jsonl when it was written: a resume cuts the
                              // lines of steps it will redo
  double elapsed_s = 0;       // wall time of all slices so far
  int64_t skipped_steps = 0;  // steps with a non-finite loss or gradient that made no update
                              // (skip_nonfinite_steps); AdamW's step count is step - this
};

nlohmann::json to_json(const TrainerState& s);
// Throws BadInput naming `origin` and the field when something is missing or malformed.
TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& origin);

// optimizer.safetensors: "<param>.exp_avg" and "<param>.exp_avg_sq" (F32, shape (numel)) for
// every parameter, torch's names for the moments, and "step" (I64 scalar).
void write_optimizer_state(const std::string& path, const AdamW& adamw);
// Restores moments and step count; BadInput naming the file and tensor when a parameter is
// missing or its size differs.
void read_optimizer_state(const std::string& path, AdamW& adamw);

}  // namespace medtune::train
