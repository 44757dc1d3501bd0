// metrics.jsonl's records as TensorBoard scalars (report_to: tensorboard), under the tags
// Hugging Face's Trainer uses, so a medtune run sits beside a transformers or axolotl run in the
// same TensorBoard:
//   {"step": s, ...}   -> train/loss, train/learning_rate, train/grad_norm, train/tokens_per_second,
//                         train/rss_mib (resident memory, rss_bytes / 2^20), train/epoch
//   {"eval": {...}}    -> eval/loss (when the run has validation tokens), eval/accuracy
// The values are metrics.jsonl's, rounded to float32 (TensorBoard's simple_value).
#pragma once

#include <memory>
#include <string>

#include "train/metrics_log.h"
#include "train/tfevents.h"

namespace medtune::train {

// The scalars one metrics.jsonl record holds; empty for records that hold none (the summary).
ScalarValues tensorboard_scalars(const nlohmann::json& record, int64_t& step);

class TensorBoardSink : public MetricsSink {
 public:
  explicit TensorBoardSink(std::string logging_dir) : dir_(std::move(logging_dir)) {}
  // Opens a new event file in logging_dir and writes SessionLog START at the first step this
  // invocation logs (0, or the checkpoint's step + 1): TensorBoard then forgets what it read at
  // that step or later. On a resume those are the interrupted run's steps after its checkpoint
  // (taken again now); on a fresh start, an earlier run's events in the same directory.
  void started(int64_t step, int64_t total_steps) override;
  void record(const nlohmann::json& record) override;
  void checkpoint_saved(int64_t) override {}
  const std::string& file_path() const;

 private:
  std::string dir_;
  std::unique_ptr<EventFileWriter> writer_;
};

}  // namespace medtune::train
