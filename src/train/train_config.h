// The training config of `medtune train --config run.yaml [key=value ...]`: axolotl's key names
// (where axolotl has one) parsed at the edge into a typed, validated struct. docs/configuration.md
// documents every key; configs/*.yaml are commented examples.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/lora.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace medtune::train {

enum class AdapterKind { kLora, kQlora };
// How the frozen base weights are held in memory: kNone keeps the checkpoint's own dtype (a .gguf's
// quantization stays as it is), kNf4 quantizes them to NF4 at load (QLoRA).
enum class BaseQuant { kNone, kNf4 };
enum class DatasetType {
  kMedqa,  // MedQA .jsonl items (question, options, answer), rendered by prompt_format
  kChat,   // {"messages": [{"role", "content"}, ...]} rendered by the model's chat template
  // axolotl's types, with its semantics (train/dataset_formats.h):
  kAlpaca,        // {"instruction", "input", "output"} in axolotl's Alpaca prompt
  kCompletion,    // {"text"}: raw text, every token trained
  kInputOutput,   // {"segments": [{"text", "label"}]}: loss on the label: true segments
  kChatTemplate,  // "messages" or ShareGPT "conversations", every roles_to_train turn trained
  // The Open Medical-LLM Leaderboard's lm-eval tasks as training data (eval/tasks.h): records in
  // the layouts their data sets are published in, each rendered with the task's own zero-shot
  // prompt, the target being what `eval --task` scores (" A".." D"; pubmedqa " yes"/" no"/" maybe").
  // The type's name is the task's name.
  kMedqa4Options,
  kMedmcqa,
  kPubmedqa,
  kMmluAnatomy,
  kMmluClinicalKnowledge,
  kMmluCollegeBiology,
  kMmluCollegeMedicine,
  kMmluMedicalGenetics,
  kMmluProfessionalMedicine,
};
// The lm-eval task types (kMedqa4Options .. kMmluProfessionalMedicine).
bool is_lm_eval_task_type(DatasetType t);
// How MedQA items become text: kLmEval is lm-evaluation-harness' plain "Question: ... Answer:"
// prompt (works for base models); kChat wraps it in the model's chat template with system_prompt.
enum class PromptFormat { kLmEval, kChat };
// What a multiple-choice item's answer tokens are: the gold letter (scored by `eval --scoring
// letter`) or the gold option's text (scored by `eval --scoring text`, lm-eval's acc).
enum class AnswerTarget { kLetter, kText };

struct DatasetSpec {
  std::string path;  // absolute (relative paths in the YAML resolve against the working directory)
  DatasetType type = DatasetType::kMedqa;
  // axolotl's per-dataset keys, read by the types they belong to (docs/configuration.md); an
  // empty string is axolotl's default.
  // (The {} initializers let `DatasetSpec{path, type}` leave them out without a warning.)
  std::string field{};              // completion: "text"
  std::string field_instruction{};  // alpaca: "instruction"
  std::string field_input{};        // alpaca: "input"
  std::string field_output{};       // alpaca: "output"
  std::string field_system{};       // chat_template: a record's system prompt, "system"
  std::string field_messages{};     // chat_template: "messages" (or ShareGPT "conversations" when absent)
  // chat_template: message_property_mappings' role and content (or message_field_role/_content):
  // "role"/"content" (or ShareGPT "from"/"value" when a message has no "role").
  std::string message_field_role{};
  std::string message_field_content{};
  std::vector<std::string> roles_to_train{"assistant"};  // chat_template
  std::string train_on_eos = "turn";                     // chat_template: turn, all, last or none
  int cop_base = -1;  // medmcqa: cop counts from 0 or 1; -1: detected from the file (eval/tasks.h)
  bool operator==(const DatasetSpec&) const = default;
};

struct TrainConfig {
  // Model and adapter.
  std::string base_model;  // absolute path of an HF directory or a .gguf file
  AdapterKind adapter = AdapterKind::kLora;
  bool load_in_4bit = false;                // resolved: true exactly when adapter is qlora
  BaseQuant base_quant = BaseQuant::kNone;  // resolved: kNf4 exactly when adapter is qlora
  int64_t lora_r = 8;
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  // Resolved, in the canonical order q k v o gate up down, no repeats (lora_target_linear: all).
  std::vector<model::Proj> lora_target_modules{model::Proj::q, model::Proj::v};
  bool peft_use_rslora = false;

  // Data.
  std::vector<DatasetSpec> datasets;
  std::vector<DatasetSpec> test_datasets;  // empty: validation comes from val_set_size (if any)
  // val_set_size: at most one of these is non-zero. A fraction in (0, 1) of the training items, or
  // a count of items; both zero: no split.
  double val_set_fraction = 0.0;
  int64_t val_set_count = 0;
  int64_t sequence_len = 512;
  bool sample_packing = false;
  bool group_by_length = false;
  bool train_on_inputs = false;  // false: loss on the completion (answer) tokens only
  bool skip_invalid = false;     // skip (and count) bad dataset records instead of stopping
  PromptFormat prompt_format = PromptFormat::kLmEval;
  std::string system_prompt = "You are a clinician; choose the single best option.";
  AnswerTarget answer_target = AnswerTarget::kLetter;

  // Optimization.
  int64_t micro_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  double num_epochs = 1;
  int64_t max_steps = -1;  // > 0 overrides num_epochs (transformers' semantics)
  double learning_rate = 2e-4;
  ScheduleKind lr_scheduler = ScheduleKind::kCosine;
  int64_t warmup_steps = 0;
  std::optional<double> warmup_ratio;  // set: warmup is ratio * total steps (warmup_steps is 0)
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
  // Steps with a non-finite loss or gradient norm that may be skipped (no update) in the whole
  // run before it stops as diverged; 0: stop at the first (the trainer never writes a
  // non-finite adapter either way).
  int64_t skip_nonfinite_steps = 0;
  bool gradient_checkpointing = false;
  int64_t seed = 42;

  // Run control.
  std::string output_dir;        // absolute; default "./outputs/run" under the working directory
  int64_t save_steps = 0;        // 0: save only at the end
  int64_t save_total_limit = 3;  // 0: keep every checkpoint
  int64_t eval_steps = 0;        // 0: never
  int64_t logging_steps = 1;
  bool report_to_tensorboard = false;  // report_to: tensorboard (event files in logging_dir)
  std::string logging_dir;             // absolute; "": <output_dir>/runs (logging_dir_of)
  int64_t num_threads = 0;             // 0: all cores
  std::string device = "cpu";          // where to compute: cpu, gpu, gpu:N (backend::parse_device)
  std::string precision = "auto";      // fp32, bf16, auto (bf16 on a GPU): backend::parse_precision
  int64_t max_runtime_s = 0;           // 0: no limit
  // Data-parallel jobs (mpirun/srun; docs/distributed.md). Neither changes what is trained, so a
  // resume may change them (checkpoint_identity.cpp).
  double ddp_timeout_s = 0;            // 0: dist::timeout_s()'s default (1800 s, transformers' ddp_timeout)
  // At precision bf16 on the CPU (oneDNN's native bf16): keep a bf16 copy of the frozen base
  // linears (model::keep_bf16_copies): auto (when the run still fits in half the available
  // memory, train/memory_plan.h), true, false.
  std::string bf16_weight_copy = "auto";
  // On a device: the most device memory a step may plan to use, in bytes (0: auto, the device's
  // free memory at start). A micro-batch whose plan is larger runs in passes of fewer rows
  // (train/memory_plan.h: plan_device_passes). Ignored on the CPU (a warning says so).
  double max_device_memory = 0;
  std::string ddp_reduction = "auto";  // ordered, allreduce, auto (ordered on the CPU, allreduce with NCCL/RCCL)
  std::string resume_from_checkpoint;  // "": start fresh; "auto": latest in output_dir; else a path

  // Why an accepted key does nothing (bf16 on the CPU, ...) or an odd combination; the trainer
  // logs these. Not a setting: to_json / to_yaml leave it out.
  std::vector<std::string> warnings;

  bool operator==(const TrainConfig&) const = default;
};

// Reads the YAML file, applies the `key=value` overrides (values parsed as YAML scalars or flow
// sequences: `lora_r=16`, `lora_target_modules=[q_proj,v_proj]`, `learning_rate=1e-4`), validates
// and resolves. Throws BadInput naming the file and line (or "command line") and the key: unknown
// keys (with a suggestion), wrong types, values out of range, missing or contradictory keys, and
// axolotl keys that medtune does not support and that would change the result (deepspeed, fsdp...).
// File paths are not checked for existence here; the trainer opens them.
TrainConfig load_train_config(const std::string& yaml_path,
                              const std::vector<std::string>& overrides = {});

// The resolved config as JSON (written to the run directory for provenance). It is also a valid
// config: YAML is a superset of JSON, so load_train_config reads it back to an equal TrainConfig.
nlohmann::json to_json(const TrainConfig& cfg);
// The resolved config as YAML, every key explicit; load_train_config reads it back to an equal
// config.
std::string to_yaml(const TrainConfig& cfg);

// A duration as max_runtime and `medtune train --max-runtime` take it: "12h", "90m", "1h30m",
// "3600s", "2d" or a bare number of seconds. nullopt when malformed, zero or overflowing.
inline constexpr std::string_view kDurationMust = "a duration like 12h, 90m, 1h30m or 3600s";
std::optional<int64_t> parse_duration_s(std::string_view text);

// A memory size as max_device_memory takes it: a number with a binary unit ("8GiB", "512 MiB",
// "1.5TiB"), a decimal one ("16GB", "500MB": 10^9, 10^6 bytes), or a bare number of
// bytes; rounded to whole bytes. nullopt when malformed, below one byte or above 2^62.
inline constexpr std::string_view kMemorySizeMust =
    "auto or a size like 8GiB, 15.3GiB, 512MiB or 16GB";
std::optional<double> parse_memory_size(std::string_view text);
// The size back as text: whole GiB or MiB when exact ("8GiB", "1536MiB"), else bytes.
std::string format_memory_size(double bytes);

// Where TensorBoard event files go: cfg.logging_dir, or <output_dir>/runs.
std::string logging_dir_of(const TrainConfig& cfg);

// The parts other components take.
model::LoraConfig lora_config(const TrainConfig& cfg);
AdamWConfig adamw_config(const TrainConfig& cfg);

std::string_view adapter_name(AdapterKind a);
std::string_view base_quant_name(BaseQuant q);
std::string_view dataset_type_name(DatasetType t);
std::string_view prompt_format_name(PromptFormat f);
std::string_view answer_target_name(AnswerTarget t);

}  // namespace medtune::train
