// medtune train --config run.yaml [key=value ...] [--dry-run] [--resume auto|PATH] [--force-resume]
//               [--max-runtime 12h] [--skip-invalid] [--ddp-timeout S] [--reduction ordered|allreduce]
// Under mpirun or srun each process is one data-parallel rank (docs/distributed.md).
// Opens the model and tokenizer, renders the datasets into token ids (MedQA items through the
// prompt renderer, conversations through the chat template, axolotl's types through
// train/dataset_formats.h), and hands them to the training loop
// (train/trainer.h). --dry-run stops after planning: resolved config, dataset sizes, steps and a
// memory estimate.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <span>

#include <omp.h>

#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "dist/gpu_collectives.h"
#include "dist/launch.h"
#include "eval/medqa.h"
#include "eval/prompt.h"
#include "eval/scorer.h"
#include "eval/tasks.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/row_shards.h"
#include "model/weight_check.h"
#include "model_files.h"
#include "tokenizer/chat_template.h"
#include "train/batcher.h"
#include "train/data.h"
#include "train/dataset_formats.h"
#include "train/metrics_log.h"
#include "train/memory_plan.h"
#include "train/progress.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train_report.h"

namespace medtune::cli {

namespace {

namespace fs = std::filesystem;

// Everything the datasets turn into: examples, and for the validation set the MedQA items too
// (letter accuracy scores items, not examples).
struct LoadedData {
  train::TrainData data;
  std::vector<eval::McqItem> val_items;
  int64_t truncated = 0;
  int64_t skipped = 0;  // invalid records left out (skip_invalid)
  std::string first_skipped;
};

struct Renderers {
  const tokenizer::Tokenizer& tok;
  std::optional<tokenizer::ChatTemplate> chat;
  std::unique_ptr<eval::PromptRenderer> prompts;
  std::string bos, eos;
  bool option_text = false;  // answer_target: text
};

// The tokenizer and chat template as the axolotl types take them (train/dataset_formats.h).
train::TextCodec text_codec(const Renderers& r) {
  train::TextCodec c;
  c.encode = [&r](const std::string& text, bool add_special) { return r.tok.encode(text, add_special); };
  c.bos_id = r.tok.bos_id();
  c.eos_id = r.tok.eos_id();
  if (r.chat)
    c.apply = [&r](const std::vector<tokenizer::ChatMessage>& m, bool gen) { return r.chat->apply(m, gen, r.bos, r.eos); };
  return c;
}

// Examples of one dataset file; MedQA items are appended to `items` in the same order.
void load_dataset(const train::DatasetSpec& spec, const train::TrainConfig& cfg, Renderers& r,
                  std::vector<train::Example>& out, std::vector<std::optional<eval::McqItem>>& items,
                  LoadedData& ld) {
  if (train::is_axolotl_type(spec.type)) {
    train::DatasetLoad load = train::read_axolotl_dataset(spec, {cfg.train_on_inputs, cfg.sequence_len},
                                                          text_codec(r), cfg.skip_invalid);
    for (auto& ex : load.examples) {
      out.push_back(std::move(ex));
      items.emplace_back(std::nullopt);
    }
    ld.truncated += load.truncated;
    if (load.skipped > 0 && ld.skipped == 0) ld.first_skipped = load.first_skipped;
    ld.skipped += load.skipped;
    return;
  }
  if (train::is_lm_eval_task_type(spec.type)) {
    // The task's own prompt and target, as `eval --task` scores them; not the config's
    // prompt_format / answer_target, which are for `type: medqa`. Their items are not scored
    // by the in-training evaluation (it renders with the config's prompt): loss only.
    const eval::TaskSpec& task = eval::task_spec(std::string(train::dataset_type_name(spec.type)));
    const eval::McqSet set = eval::read_task_questions(task, spec.path, {spec.cop_base, cfg.skip_invalid});
    eval::PromptOptions popt;
    popt.task = &task;
    const eval::PromptRenderer renderer(popt, r.tok, std::nullopt);
    for (const auto& item : set.items) {
      train::Example ex;
      ex.source = item.id;
      renderer.training_example(item, ex.context, ex.answer, task.scores_option_text);
      out.push_back(std::move(ex));
      items.emplace_back(std::nullopt);
    }
    if (set.skipped > 0 && ld.skipped == 0 && !set.skip_reasons.empty()) ld.first_skipped = set.skip_reasons.front();
    ld.skipped += set.skipped;
    return;
  }
  if (spec.type == train::DatasetType::kMedqa) {
    const eval::McqSet set = eval::read_mcq_jsonl(spec.path, cfg.skip_invalid);
    if (set.skipped > 0 && ld.skipped == 0 && !set.skip_reasons.empty()) ld.first_skipped = set.skip_reasons.front();
    ld.skipped += set.skipped;
    for (const auto& item : set.items) {
      train::Example ex;
      ex.source = spec.path + ":" + std::to_string(item.line);
      r.prompts->training_example(item, ex.context, ex.answer, r.option_text);
      out.push_back(std::move(ex));
      items.emplace_back(item);
    }
    return;
  }
  if (!r.chat) throw BadInput(spec.path + ": a chat dataset needs the model's chat template, and it has none");
  std::vector<std::string> skipped;
  const auto records = train::read_chat_jsonl(spec.path, cfg.skip_invalid ? &skipped : nullptr);
  if (!skipped.empty() && ld.skipped == 0) ld.first_skipped = skipped.front();
  ld.skipped += static_cast<int64_t>(skipped.size());
  auto apply = [&](const std::vector<tokenizer::ChatMessage>& m, bool gen) {
    return r.chat->apply(m, gen, r.bos, r.eos);
  };
  // The template writes BOS itself where the model wants one: no post-processor tokens.
  auto encode = [&](const std::string& text) { return r.tok.encode(text, false); };
  for (const auto& rec : records) {
    out.push_back(train::chat_example(rec, apply, encode));
    items.emplace_back(std::nullopt);
  }
}

LoadedData load_data(const train::TrainConfig& cfg, Renderers& r) {
  LoadedData ld;
  std::vector<train::Example> all;
  std::vector<std::optional<eval::McqItem>> all_items;
  for (const auto& spec : cfg.datasets) load_dataset(spec, cfg, r, all, all_items, ld);
  if (!cfg.test_datasets.empty()) {
    ld.data.train = std::move(all);
    std::vector<std::optional<eval::McqItem>> val_items;
    for (const auto& spec : cfg.test_datasets) load_dataset(spec, cfg, r, ld.data.val, val_items, ld);
    for (auto& it : val_items)
      if (it) ld.val_items.push_back(std::move(*it));
  } else {
    const auto split = train::split_validation(static_cast<int64_t>(all.size()), cfg.val_set_fraction,
                                               cfg.val_set_count, static_cast<uint64_t>(cfg.seed));
    for (int64_t i : split.train) ld.data.train.push_back(std::move(all[static_cast<size_t>(i)]));
    for (int64_t i : split.val) {
      ld.data.val.push_back(std::move(all[static_cast<size_t>(i)]));
      if (all_items[static_cast<size_t>(i)]) ld.val_items.push_back(*all_items[static_cast<size_t>(i)]);
    }
  }
  for (auto* set : {&ld.data.train, &ld.data.val})
    for (auto& ex : *set) ld.truncated += train::truncate_left(ex, cfg.sequence_len) > 0 ? 1 : 0;
  const int32_t pad = r.tok.pad_id() >= 0 ? r.tok.pad_id() : std::max(r.tok.eos_id(), 0);
  ld.data.pad_id = pad;
  ld.data.skipped_records = ld.skipped;
  return ld;
}

// The validation accuracy with the questions split over the ranks (dist::share_of): each rank
// scores its share, the correct counts are summed (exact in a double). The same number as one
// process: each question is scored as one process scores it.
double split_accuracy(dist::Communicator& comm, model::LlamaModel& model, const eval::PromptRenderer& prompts,
                      const std::vector<eval::McqItem>& items, eval::Scoring scoring) {
  if (items.empty()) return 0.0;
  const dist::Share share = dist::share_of(items.size(), comm);
  const std::vector<eval::McqItem> mine(items.begin() + static_cast<std::ptrdiff_t>(share.begin),
                                        items.begin() + static_cast<std::ptrdiff_t>(share.end));
  double correct = 0;
  for (const auto& q : eval::score_questions(model, prompts, mine, scoring)) correct += q.pred == q.gold ? 1 : 0;
  if (comm.size() > 1) comm.allreduce_sum(std::span<double>(&correct, 1), "the validation accuracy");
  return correct / static_cast<double>(items.size());
}

}  // namespace

void add_train_command(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool dry_run = false;
    std::string resume;       // "auto" or a checkpoint folder; overrides resume_from_checkpoint
    bool force_resume = false;
    bool overwrite_output_dir = false;
    bool check_tensors = true;
    std::string max_runtime;  // overrides max_runtime
    std::string device;       // overrides device
    std::string precision;    // overrides precision
    bool skip_invalid = false;  // overrides skip_invalid
    std::string ddp_timeout;    // overrides ddp_timeout
    std::string reduction;      // overrides ddp_reduction
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train", "Fine-tune a LoRA adapter from an axolotl-style YAML config");
  cmd->add_option("-c,--config", args->config, "Training config (YAML)")->required();
  cmd->add_option("overrides", args->overrides, "key=value settings that override the config");
  cmd->add_flag("--dry-run", args->dry_run, "Print the resolved config, data sizes, steps and memory plan; do not train");
  cmd->add_option("--resume", args->resume,
                  "Continue from a checkpoint: 'auto' (the newest valid one in output_dir; none: start fresh) "
                  "or a checkpoint-<step> folder");
  cmd->add_flag("--force-resume", args->force_resume,
                "Resume even if the base model, data or config differ from the checkpoint's");
  cmd->add_flag("--overwrite-output-dir", args->overwrite_output_dir,
                "Start fresh even though output_dir holds an earlier run's checkpoints (deletes them)");
  cmd->add_flag("--check-tensors,!--no-check-tensors", args->check_tensors,
                "Check every base weight for NaN/Inf before training (default: on; one pass over the model)");
  cmd->add_option("--device", args->device,
                  "Where to compute: cpu | gpu | gpu:N (the config key device; a GPU build, docs/gpu.md)");
  cmd->add_option("--precision", args->precision,
                  "Linear layers' arithmetic: fp32 | bf16 | auto (bf16 on a GPU; the config key precision; int8 is refused: inference only)");
  cmd->add_flag("--skip-invalid", args->skip_invalid,
                "Leave out (and count) dataset records that are invalid instead of stopping (the config key skip_invalid)");
  cmd->add_option("--max-runtime", args->max_runtime,
                  "Save a checkpoint and exit 0 after this long (12h, 90m, 3600s or seconds)");
  cmd->add_option("--ddp-timeout", args->ddp_timeout,
                  "Under mpirun/srun: seconds a rank waits for the others before it ends the job (the config key "
                  "ddp_timeout; default 1800)");
  cmd->add_option("--reduction", args->reduction,
                  "Under mpirun/srun: how gradients are summed over ranks (the config key ddp_reduction): ordered "
                  "(default on the CPU; bit-identical to one process with world x accumulation) or allreduce (default "
                  "on GPUs: NCCL/RCCL; equal to fp32 rounding)");
  cmd->callback([args] {
    std::vector<std::string> overrides = args->overrides;
    if (!args->device.empty()) overrides.push_back("device=" + args->device);  // last: wins
    if (!args->precision.empty()) overrides.push_back("precision=" + args->precision);
    if (args->skip_invalid) overrides.push_back("skip_invalid=true");
    if (!args->ddp_timeout.empty()) overrides.push_back("ddp_timeout=" + args->ddp_timeout);
    if (!args->reduction.empty()) overrides.push_back("ddp_reduction=" + args->reduction);
    train::TrainConfig cfg = train::load_train_config(args->config, overrides);
    // One rank of a data-parallel job when a launcher started it (mpirun, srun; dist/launch.h).
    // Rank 0 alone prints; every rank checks and trains.
    if (cfg.ddp_timeout_s > 0) dist::set_timeout_s(cfg.ddp_timeout_s);
    dist::Communicator& comm = dist::world();
    const bool lead = comm.rank() == 0;
    std::ostream silent(nullptr);
    std::ostream& note = lead ? std::cerr : silent;
    // Each rank of a machine on its own GPU: "gpu" means the local rank's.
    if (comm.local_size() > 1 && cfg.device == "gpu") cfg.device = "gpu:" + std::to_string(comm.local_rank());
    if (!args->max_runtime.empty()) {
      const auto s = train::parse_duration_s(args->max_runtime);
      if (!s) throw BadInput("--max-runtime: expected " + std::string(train::kDurationMust) + ", got '" + args->max_runtime + "'");
      cfg.max_runtime_s = *s;
    }
    if (!args->resume.empty())
      cfg.resume_from_checkpoint = args->resume == "auto" ? args->resume : fs::absolute(args->resume).string();
    auto ckpt = io::open_checkpoint(cfg.base_model);
    const auto tok = open_tokenizer(ckpt);
    Renderers r{*tok, std::nullopt, nullptr, "", "", cfg.answer_target == train::AnswerTarget::kText};
    r.bos = tok->bos_id() >= 0 ? tok->token_piece(tok->bos_id()) : "";
    r.eos = tok->eos_id() >= 0 ? tok->token_piece(tok->eos_id()) : "";
    bool needs_chat = cfg.prompt_format == train::PromptFormat::kChat;
    for (const auto* list : {&cfg.datasets, &cfg.test_datasets})
      for (const auto& d : *list)
        needs_chat = needs_chat || d.type == train::DatasetType::kChat || d.type == train::DatasetType::kChatTemplate;
    if (needs_chat) {
      const auto src = find_chat_template(ckpt);
      r.chat.emplace(src.text, src.origin);
    }
    eval::PromptOptions popt;
    popt.format = cfg.prompt_format == train::PromptFormat::kChat ? eval::PromptFormat::chat : eval::PromptFormat::lm_eval;
    popt.system_prompt = cfg.system_prompt;
    std::optional<tokenizer::ChatTemplate> prompt_chat;
    if (popt.format == eval::PromptFormat::chat) {
      const auto src = find_chat_template(ckpt);
      prompt_chat.emplace(src.text, src.origin);
    }
    r.prompts = std::make_unique<eval::PromptRenderer>(popt, *tok, std::move(prompt_chat));

    LoadedData ld = load_data(cfg, r);
    // Positions past max_position_embeddings are outside what RoPE was trained on; axolotl warns
    // and trains on, and so does medtune, with the count.
    if (const int64_t max_pos = ckpt.config.max_position_embeddings; max_pos > 0 && cfg.sequence_len > max_pos) {
      int64_t beyond = 0;
      for (const auto* set : {&ld.data.train, &ld.data.val})
        for (const auto& ex : *set) beyond += ex.length() > max_pos ? 1 : 0;
      if (beyond > 0)
        note << "medtune: warning: sequence_len " << cfg.sequence_len << " is above the model's context ("
                  << max_pos << " tokens, max_position_embeddings): " << beyond
                  << " example(s) are longer and train at positions the model was not trained on\n";
    }
    const train::StepPlan plan = train::plan_steps(cfg, train::example_lengths(ld.data.train));
    int64_t max_len = 0, answer_tokens = 0;
    for (const auto& ex : ld.data.train) {
      max_len = std::max(max_len, ex.length());
      answer_tokens += ex.trained_tokens();
    }
    note << "data: " << ld.data.train.size() << " training examples, " << ld.data.val.size()
              << " validation (" << ld.val_items.size() << " scored by letter), longest " << max_len
              << " tokens, " << ld.truncated << " truncated to sequence_len " << cfg.sequence_len << "\n";
    if (ld.skipped > 0)
      note << "data: skipped " << ld.skipped << " invalid record(s) (skip_invalid); the first: "
                << ld.first_skipped << "\n";

    // The memory plan, from the adapter's shapes (nothing of its size allocated yet).
    // On a device, a micro-batch that does not fit `limit` bytes runs in passes of fewer rows.
    const auto lora_plan = model::lora_shapes(ckpt.config, train::lora_config(cfg));
    const auto plan_within = [&](double limit) {
      if (cfg.base_quant == train::BaseQuant::kNf4) {
        const auto wb = model::planned_weight_bytes(ckpt, model::WeightQuant::kNf4);
        return train::plan_device_passes(cfg, ckpt.config, lora_plan, wb.mapped, wb.quantized,
                                         ckpt.qk_rows_permuted, limit);
      }
      return train::plan_device_passes(cfg, ckpt.config, lora_plan,
                                       train::checkpoint_bytes(cfg.base_model), 0,
                                       ckpt.qk_rows_permuted, limit);
    };
    // The dry run opens no device: its passes are max_device_memory's (one without it).
    train::MemoryPlan memory = plan_within(cfg.max_device_memory);
    const model::WeightQuant quant = cfg.base_quant == train::BaseQuant::kNf4
                                         ? model::WeightQuant::kNf4
                                         : model::WeightQuant::kNone;
    train::settle_bf16_copy(cfg, memory,
                            2.0 * static_cast<double>(model::bf16_copy_elements(ckpt, quant)),
                            train::available_memory_bytes());
    if (args->dry_run) {
      if (!lead) return;
      // The config's warnings (keys ignored, settings without effect): a dry run is where a user
      // reads what the run would do, so they are said here too, not only when it starts.
      for (const auto& w : cfg.warnings) note << "warning: " << w << "\n";
      std::cout << train::to_yaml(cfg) << "\n"
                << "datasets: " << ld.data.train.size() << " training examples (" << answer_tokens
                << " answer tokens), " << ld.data.val.size() << " validation\n"
                << "steps: " << plan.total_steps << " (" << plan.batches_per_epoch << " micro-batches per epoch, "
                << cfg.gradient_accumulation_steps << " per step, warmup " << plan.warmup_steps << ")\n";
      std::cout << train::format_memory_plan(cfg, memory);
      return;
    }

    train::refuse_if_too_large(cfg, memory, train::available_memory_bytes());
    const backend::Device device = backend::parse_device(cfg.device, "device");
    backend::Backend& be = backend::for_device(device, backend::parse_precision(cfg.precision, device, "precision"));
    if (memory.on_device) {
      const double free_bytes = static_cast<double>(be.free_memory());
      memory = plan_within(train::device_memory_limit(cfg, free_bytes));
      train::refuse_if_too_large_on_device(cfg, memory, free_bytes);
      if (memory.device_passes > 1)
        note << "device: each micro-batch of " << cfg.micro_batch_size << " rows in "
             << memory.device_passes << " passes of at most " << memory.pass_rows << " (plan "
             << std::llround(memory.device_total() / (1 << 20)) << " MiB within "
             << (cfg.max_device_memory > 0
                     ? "max_device_memory " + train::format_memory_size(cfg.max_device_memory)
                     : std::string("the device's free memory"))
             << ")\n";
    }
    if (args->check_tensors) model::check_weights_finite(ckpt);
    // QLoRA (adapter: qlora / load_in_4bit / base_quant: nf4): the block linears become NF4 here
    model::LlamaModel model(std::move(ckpt), quant, be);
    // The device's buffer cache stays within the plan (backend.h: plan_memory), its weights as
    // uploaded (the file's bf16 norms are fp32 there: 16 KiB a 7B layer more than planned).
    if (memory.on_device)
      be.plan_memory(static_cast<int64_t>(memory.device_total() - memory.device_weights) +
                     be.resident_bytes());
    if (!be.device().is_cpu() || be.precision() != backend::Precision::kFp32) note << "device: " << be.describe() << "\n";
    if (memory.bf16_copy > 0)
      note << "bf16 copy of the base linears: "
           << (model.keep_bf16_weight_copies() + (1 << 19)) / (1 << 20)
           << " MiB (bf16_weight_copy: " << cfg.bf16_weight_copy << ")\n";
    train::TrainHooks hooks;
    hooks.force_resume = args->force_resume;
    hooks.device_passes = memory.device_passes;
    hooks.overwrite_output_dir = args->overwrite_output_dir;
    // GPU ranks all-reduce through NCCL/RCCL when the build has it (run only as a world of one
    // GPU: docs/distributed.md).
    std::unique_ptr<dist::Communicator> gpu_comm;
    if (comm.size() > 1 && !be.device().is_cpu()) gpu_comm = dist::with_gpu_collectives(comm, be.device().index);
    hooks.comm = gpu_comm ? gpu_comm.get() : &comm;
    hooks.deterministic_reduction =
        cfg.ddp_reduction == "auto" ? be.device().is_cpu() || !gpu_comm : cfg.ddp_reduction == "ordered";
    if (lead) hooks.metrics_sinks.push_back(std::make_shared<TrainReportSink>(cfg));
    if (!ld.val_items.empty())
      hooks.accuracy = [&] {
        return split_accuracy(*hooks.comm, model, *r.prompts, ld.val_items,
                              r.option_text ? eval::Scoring::text : eval::Scoring::letter);
      };
    const train::TrainSummary s = train::run_training(cfg, model, ld.data, hooks, std::cerr);
    if (s.stop_reason == "diverged") {
      note << "medtune: training diverged at " << s.diverged
                << ".\nNothing from that step was kept and no adapter was written; "
                << (s.checkpoint_dir.empty() ? "no checkpoint had been saved before it"
                                             : "the last good checkpoint is " + s.checkpoint_dir)
                << ".\nLower learning_rate (" << cfg.learning_rate
                << ") and start again, or set skip_nonfinite_steps to skip a few such steps.\n";
      throw ExitWith{kExitDiverged};
    }
    if (!lead) return;

    std::printf("steps %lld/%lld (%s), %lld target tokens, final loss %.4f, %s\n",
                static_cast<long long>(s.steps), static_cast<long long>(s.total_steps), s.stop_reason.c_str(),
                static_cast<long long>(s.tokens), s.final_loss, train::format_duration(s.elapsed_s).c_str());
    if (!s.evals.empty()) {
      const auto& a = s.evals.front();
      const auto& b = s.evals.back();
      std::printf("validation loss %.4f -> %.4f", a.loss, b.loss);
      if (a.accuracy && b.accuracy)
        std::printf(", %s accuracy %.4f -> %.4f", r.option_text ? "option-text" : "letter", *a.accuracy, *b.accuracy);
      std::printf(" (step %lld -> %lld)\n", static_cast<long long>(a.step), static_cast<long long>(b.step));
    }
    if (!s.checkpoint_dir.empty()) std::printf("checkpoint: %s\n", s.checkpoint_dir.c_str());
    std::printf("adapter: %s\n", s.adapter_dir.c_str());
    std::printf("report: %s\n", TrainReportSink::path_in(cfg.output_dir).c_str());
  });
}

}  // namespace medtune::cli
