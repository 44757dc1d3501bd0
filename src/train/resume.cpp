#include "train/resume.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/peft_adapter.h"
#include "io/whole_file.h"
#include "model/lora_peft.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

// Copies a checkpoint's adapter into `lora` (same targets and rank, checked), bit for bit: the
// adapter is stored in F32.
void restore_lora(model::LoraWeights& lora, const std::string& dir) {
  const io::PeftAdapter a = io::read_peft_adapter(dir);
  size_t matched = 0;
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (int p = 0; p < model::kNumProj; ++p) {
      auto& ll = lora.layers[l][static_cast<size_t>(p)];
      if (!ll.enabled()) continue;
      const std::string module = model::proj_module_path(static_cast<int64_t>(l), static_cast<model::Proj>(p));
      const auto it = std::find_if(a.pairs.begin(), a.pairs.end(), [&](const auto& x) { return x.module == module; });
      if (it == a.pairs.end() || it->A.size() != ll.A.size() || it->B.size() != ll.B.size())
        throw BadInput(dir + "/adapter_model.safetensors: " + module +
                       " is missing or has another shape than this run's LoRA");
      std::copy(it->A.begin(), it->A.end(), ll.A.begin());
      std::copy(it->B.begin(), it->B.end(), ll.B.begin());
      ++matched;
    }
  if (matched != a.pairs.size())
    throw BadInput(dir + "/adapter_model.safetensors: adapts " + std::to_string(a.pairs.size()) +
                   " modules, this run " + std::to_string(matched));
}

bool all_finite(const model::LoraWeights& lora) {
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer)
      for (const auto* v : {&ll.A, &ll.B})
        for (float x : *v)
          if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

std::optional<CheckpointEntry> find_resume_point(const TrainConfig& cfg, Progress& progress) {
  if (cfg.resume_from_checkpoint.empty()) return std::nullopt;
  if (cfg.resume_from_checkpoint == "auto") {
    std::vector<std::string> warnings;
    auto found = newest_valid_checkpoint(cfg.output_dir, warnings);
    for (const auto& w : warnings) progress.message("warning: " + w);
    // Only when the folder holds no checkpoint at all: damaged ones are refused by the caller.
    if (!found && list_checkpoints(cfg.output_dir).empty())
      progress.message("resume auto: no checkpoint in " + cfg.output_dir + " yet; starting fresh");
    return found;
  }
  const std::string& path = cfg.resume_from_checkpoint;
  if (!fs::is_directory(path)) throw BadInput("resume_from_checkpoint: " + path + ": no such checkpoint folder");
  const std::string problem = checkpoint_problem(path);
  if (!problem.empty()) throw BadInput("cannot resume from " + path + ": " + problem);
  const auto step = checkpoint_step(fs::path(path).filename().string());
  return CheckpointEntry{step.value_or(-1), path};
}

// A fresh start into a directory that holds an earlier run: its checkpoints (a later --resume
// auto would take them for this run's, and pruning would delete this run's newer-numbered ones in
// their favour) or its final adapter. Forgetting --resume must not cost a long run: refused
// unless the user asked for the old run to be replaced. Checks only; writes nothing.
void refuse_earlier_run(const TrainConfig& cfg, const TrainHooks& hooks) {
  if (hooks.overwrite_output_dir) return;
  const auto old_checkpoints = list_checkpoints(cfg.output_dir);
  std::error_code ec;
  const bool old_adapter = fs::exists(fs::path(cfg.output_dir) / "adapter", ec);
  if (old_checkpoints.empty() && !old_adapter) return;
  const std::string what =
      old_checkpoints.empty() ? "the adapter of an earlier run (adapter/)"
                              : "checkpoints of an earlier run (" +
                                    fs::path(old_checkpoints.back().path).filename().string() +
                                    (cfg.resume_from_checkpoint == "auto" ? ", none of them valid" : "") + ")";
  throw BadInput("output_dir " + cfg.output_dir + " holds " + what +
                 ": continue it with --resume auto, choose another output_dir, or pass "
                 "--overwrite-output-dir to replace it (nothing was changed)");
}

TrainerState read_resume_checkpoint(const CheckpointEntry& from, const RunIdentity& identity,
                                    const StepPlan& plan, bool force, model::LoraWeights& lora,
                                    AdamW& adamw, Progress& progress) {
  const RunIdentity saved = identity_from_json(io::read_json_file(from.path + "/identity.json"),
                                               from.path + "/identity.json");
  const auto diffs = identity_differences(saved, identity);
  if (!diffs.empty()) {
    std::string what = "it was written by a different run:";
    for (const auto& d : diffs) what += "\n  " + d;
    if (!force)
      throw BadInput("cannot resume from " + from.path + ": " + what +
                     "\n(use another output_dir for a new run, or --force-resume to continue anyway)");
    progress.message("warning: --force-resume: resuming from " + from.path + " although " + what);
  }
  const TrainerState resumed = trainer_state_from_json(
      io::read_json_file(from.path + "/trainer_state.json"), from.path + "/trainer_state.json");
  if (resumed.step > plan.total_steps)
    throw BadInput(from.path + ": step " + std::to_string(resumed.step) + " is past this run's " +
                   std::to_string(plan.total_steps) + " steps");
  if ((resumed.total_steps != plan.total_steps || resumed.warmup_steps != plan.warmup_steps) && !force)
    throw BadInput(from.path + ": planned " + std::to_string(resumed.total_steps) + " steps (" +
                   std::to_string(resumed.warmup_steps) + " warmup), this run " + std::to_string(plan.total_steps) +
                   " (" + std::to_string(plan.warmup_steps) + ")");
  restore_lora(lora, from.path);
  read_optimizer_state(from.path + "/optimizer.safetensors", adamw);
  if (adamw.step_count() != resumed.step - resumed.skipped_steps)
    throw BadInput(from.path + ": optimizer.safetensors is at step " + std::to_string(adamw.step_count()) +
                   ", trainer_state.json at step " + std::to_string(resumed.step) + " with " +
                   std::to_string(resumed.skipped_steps) + " skipped");
  if (!all_finite(lora))
    throw BadInput(from.path + "/adapter_model.safetensors: holds NaN or Inf weights; resume from an earlier checkpoint");
  return resumed;
}

}  // namespace medtune::train
