// The training loop: LoRA on a frozen Llama-family model, AdamW, gradient accumulation with
// token-level loss normalisation, clipping, the LR schedule, logging, evaluation, checkpoints and
// clean stops (signal, max_runtime).
//
// Why the caller passes the model and the tokenized examples instead of run_training opening them
// from the config: turning MedQA items and conversations into ids needs the tokenizer and the
// prompt renderer (tokenizer/, eval/), which sit above train/ in the build's layering. The caller
// (apps/medtune/cmd_train.cpp) opens and renders; this file owns everything from ids on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/llama.h"
#include "train/data.h"
#include "train/metrics_log.h"
#include "train/train_config.h"

namespace medtune::train {

struct TrainData {
  std::vector<Example> train;
  std::vector<Example> val;  // may be empty: no validation loss
  int32_t pad_id = 0;
  int64_t skipped_records = 0;  // invalid dataset records left out (skip_invalid), for the manifest
};

struct TrainHooks {
  // Accuracy (letter or option-text scoring, per answer_target) on the validation questions with
  // the model as it is now (the adapter is set on it). Empty: loss only.
  std::function<double()> accuracy;
  // Safetensors metadata of every adapter the trainer writes (checkpoints and adapter/), e.g. the
  // run manifest's hash for provenance.
  std::map<std::string, std::string> adapter_metadata;
  // Resume even when the checkpoint's base model, data or config differ from this run's
  // (`--force-resume`); the differences are then logged as warnings instead of refusing.
  bool force_resume = false;
  // Start fresh even though output_dir holds another run's checkpoints, deleting them
  // (`--overwrite-output-dir`, as transformers' TrainingArguments). Without it such a start is
  // refused: forgetting --resume must never destroy hours of training.
  bool overwrite_output_dir = false;
  // Followers of metrics.jsonl besides the TensorBoard events cfg.report_to asks for (the
  // command's report.html), handed every record as it is logged.
  std::vector<std::shared_ptr<MetricsSink>> metrics_sinks;
  // The data-parallel job this process is one rank of (dist/launch.h world()); null: a single
  // process. Rank r runs micro-batches r*A..r*A+A-1 of each step's global batch of
  // micro_batch_size x gradient_accumulation_steps x world (A = gradient_accumulation_steps);
  // gradients and loss are summed over all of them (dist/gradient_sum.h); rank 0 alone writes
  // files and logs.
  dist::Communicator* comm = nullptr;
  // Sum the micro-batches' gradients in the single-process order (bit-identical to one process
  // with world x accumulation) rather than in one all-reduce (faster, equal to fp32 rounding).
  bool deterministic_reduction = true;
  // The CPU's own policies in each training pass (model/train_step.h TrainOptions: row shards, the
  // last layer run on the target rows only). Off: one pass over all rows, as a device runs it, so
  // that a CPU run can be compared bit for bit with a device's (tests).
  bool cpu_pass_policies = true;
  // On a device: each micro-batch in this many passes of fewer rows (model/train_step.h
  // TrainOptions::device_passes), as memory_plan.h's plan_device_passes chose them.
  int64_t device_passes = 1;
};

struct EvalPoint {
  int64_t step = 0;
  double loss = 0;  // mean nats per target token over the validation set
  int64_t tokens = 0;
  std::optional<double> accuracy;
};

struct TrainSummary {
  int64_t steps = 0;        // optimizer steps taken
  int64_t total_steps = 0;  // planned
  int64_t tokens = 0;       // target tokens trained on
  int64_t input_tokens = 0; // tokens run through the model (padding excluded): tokens_per_s
  double final_loss = 0;    // last step's mean loss
  std::vector<double> losses;  // per step
  std::vector<EvalPoint> evals;
  std::string stop_reason;  // "completed", "signal", "max_runtime", "diverged"
  std::string diverged;     // with "diverged": the step and what was not finite
  int64_t skipped_steps = 0;  // steps that made no update (non-finite; skip_nonfinite_steps)
  int64_t skipped_records = 0;  // TrainData::skipped_records
  std::string adapter_dir;
  std::string checkpoint_dir;  // the last checkpoint written ("" if none)
  std::string resumed_from;    // the checkpoint this run continued ("" for a fresh start)
  double elapsed_s = 0;        // this invocation's wall time
};

// The plan a config implies for a dataset: micro-batches per epoch and optimizer steps.
struct StepPlan {
  int64_t batches_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
};
// From the examples' lengths (tokens): with sample_packing the micro-batches are packed rows
// (train/batcher.h micro_batches_per_epoch). The count-only form is for unpacked runs and throws
// Internal with sample_packing, where the count alone cannot say.
StepPlan plan_steps(const TrainConfig& cfg, const std::vector<int64_t>& example_lengths);
StepPlan plan_steps(const TrainConfig& cfg, int64_t num_train_examples);

// Mean loss (nats per target token) of `examples` under the model (and its current adapter).
// The micro-batches are split over comm's ranks (dist::share_of); every rank gets the result,
// the same bits as one process (each batch's loss sum is computed as one process computes it and
// the sums are added in batch order on every rank).
EvalPoint validation_loss(model::LlamaModel& model, const std::vector<Example>& examples,
                          int64_t micro_batch_size, int32_t pad_id, dist::Communicator& comm);

// Trains cfg's adapter on `data`. Writes to cfg.output_dir: config_resolved.json, metrics.jsonl,
// checkpoint-<step>/ (every save_steps, on a stop and at the end; train/checkpoint_dir.h),
// adapter/ (final); with cfg.report_to_tensorboard, event files in logging_dir_of(cfg)
// (train/tensorboard_sink.h); and whatever hooks.metrics_sinks write. With cfg.resume_from_checkpoint ("auto": the newest valid checkpoint in
// output_dir, else a checkpoint folder) it continues that run exactly where the checkpoint left
// it; a checkpoint of another model, data or config is refused (BadInput) unless
// hooks.force_resume. Logs to `log`; a one-line progress display on stderr when it is a terminal.
// model.lora() is left pointing at nothing on return.
TrainSummary run_training(const TrainConfig& cfg, model::LlamaModel& model, const TrainData& data,
                          const TrainHooks& hooks, std::ostream& log);

// SIGINT/SIGTERM set a flag that run_training checks between steps (it installs the handlers
// itself; the previous handlers are restored when it returns). Exposed for tests.
void request_stop();

}  // namespace medtune::train
