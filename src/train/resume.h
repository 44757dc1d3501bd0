// Continuing a run from a checkpoint: which checkpoint (resume_from_checkpoint), whether a fresh
// start may replace what an earlier run left in output_dir, and reading a checkpoint back into the
// adapter and AdamW with each of its files checked against this run.
#pragma once

#include <optional>

#include "model/lora.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_identity.h"
#include "train/checkpoint_state.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace medtune::train {

// The checkpoint a run continues: cfg.resume_from_checkpoint resolved ("auto": the newest valid
// one in output_dir, skipping damaged ones with a warning). nullopt: start fresh.
std::optional<CheckpointEntry> find_resume_point(const TrainConfig& cfg, Progress& progress);

// Throws BadInput when a fresh start would replace an earlier run's checkpoints or adapter in
// output_dir without --overwrite-output-dir. Checks only; writes nothing.
void refuse_earlier_run(const TrainConfig& cfg, const TrainHooks& hooks);

// Reads checkpoint `from` into `lora` and `adamw` and returns its trainer state: everything the
// uninterrupted run held after that step. Refused (BadInput) when it was written by another run
// (identity), planned other steps, or its optimizer state or adapter do not fit; with `force`
// (--force-resume) a different identity or plan is a warning instead.
TrainerState read_resume_checkpoint(const CheckpointEntry& from, const RunIdentity& identity,
                                    const StepPlan& plan, bool force, model::LoraWeights& lora,
                                    AdamW& adamw, Progress& progress);

}  // namespace medtune::train
