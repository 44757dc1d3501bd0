// medtune eval MODEL --data FILE [options]   score multiple-choice questions, write a report
// medtune eval MODEL --task NAME --data FILE  one lm-eval task, its prompt and choices exactly
// medtune eval MODEL --suite open-medical-llm --data-dir DIR   the nine tasks, a combined report
// medtune eval --compare RUN_A RUN_B          before/after on the same questions (exact McNemar;
//                                             two suite runs: per task, Holm-adjusted)
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "adapter_loading.h"
#include "cli_checks.h"
#include "commands.h"
#include "backend/backend.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "dist/launch.h"
#include "eval/compare.h"
#include "eval/medqa.h"
#include "eval/metrics.h"
#include "eval/prompt.h"
#include "eval/report_html.h"
#include "eval/report_json.h"
#include "eval/run_provenance.h"
#include "eval/scorer.h"
#include "eval/training_comparison.h"
#include "eval/suite.h"
#include "eval/tasks.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/provenance.h"
#include "model/llama.h"
#include "model/weight_check.h"
#include "model_files.h"

namespace medtune::cli {

namespace {

struct EvalArgs {
  std::string base_quant = "none";  // --base-quant: see model::WeightQuant
  std::string device = "cpu";       // --device: backend::parse_device
  std::string precision = "auto";   // --precision: backend::parse_precision
  std::string model, data, adapter, out = "runs/eval", format = "lm_eval", scoring = "letter";
  std::string system_prompt = eval::kDefaultSystemPrompt, prompt_template, fewshot_pool;
  int fewshot = 0;
  uint64_t fewshot_seed = 1234;
  int64_t limit = 0;
  bool skip_invalid = false, json = false, quiet = false, check_tensors = true;
  bool system_given = false, template_given = false, pool_given = false;
  bool out_given = false;  // with --compare: write comparison.html there
  bool format_given = false, scoring_given = false, cop_base_given = false;
  std::string task, suite, data_dir;  // --task, --suite, --data-dir (eval/tasks.h, eval/suite.h)
  int cop_base = -1;                  // --medmcqa-cop-base; -1: detected from the file
  std::vector<std::string> compare;
};

void run_compare(const EvalArgs& a) {
  // Two suite runs are compared task by task; one suite run against a single run is a mistake.
  const bool suite_a = eval::is_suite_run(a.compare[0]), suite_b = eval::is_suite_run(a.compare[1]);
  if (suite_a != suite_b)
    throw BadInput("--compare: " + a.compare[suite_a ? 0 : 1] + " is a suite run (suite.json) but " +
                   a.compare[suite_a ? 1 : 0] + " is not: compare two suite runs, or two single runs");
  if (suite_a) {
    const auto cmp = eval::compare_suites(a.compare[0], a.compare[1]);
    if (a.json) std::cout << cmp.dump(2) << "\n";
    else std::cout << eval::render_suite_comparison_text(cmp);
    return;
  }
  const auto cmp = eval::compare_runs(a.compare[0], a.compare[1]);
  if (a.json) {
    std::cout << cmp.dump(2) << "\n";
  } else {
    std::cout << eval::render_comparison_text(cmp);
  }
  if (a.out_given) {  // the two adapters' training curves, overlaid (eval/training_comparison.h)
    const std::string page = eval::render_training_comparison(
        eval::render_comparison_text(cmp), eval::training_run_of_eval(a.compare[0]), eval::training_run_of_eval(a.compare[1]));
    io::prepare_output_dir(a.out, "--out");
    const std::string path = a.out + "/comparison.html";
    io::atomic_write_file(path, page);
    std::cerr << "comparison: " << path << "\n";
  }
}

// One question set to score and where its sub-run goes: the plain --data run, one --task, or
// each of the suite's tasks.
struct EvalJob {
  const eval::TaskSpec* task = nullptr;  // null: MedQA-style --data with --format/--scoring
  std::string data, out;
  eval::McqSet set;
};

void check_option_combinations(const EvalArgs& a) {
  // Options that would be silently ignored in this combination are refused instead.
  if (a.system_given && a.format != "chat")
    throw BadInput("--system is the chat format's system message: it needs --format chat (this run: " + a.format + ")");
  if (a.template_given && a.format != "custom")
    throw BadInput("--prompt-template is read only with --format custom (this run: " + a.format + ")");
  if (a.pool_given && a.fewshot == 0) throw BadInput("--fewshot-pool is used only with --fewshot N (N >= 1)");
  const bool tasks = !a.task.empty() || !a.suite.empty();
  if (!a.task.empty() && !a.suite.empty()) throw BadInput("--task and --suite exclude each other");
  if (tasks && (a.format_given || a.scoring_given || a.fewshot > 0))
    throw BadInput(std::string(a.suite.empty() ? "--task" : "--suite") +
                   " scores each task zero-shot with lm-eval's own prompt and choices: drop --format, --scoring and "
                   "--fewshot");
  if (a.cop_base_given && !(a.task == "medmcqa" || !a.suite.empty()))
    throw BadInput("--medmcqa-cop-base applies only to --task medmcqa or --suite");
  if (!a.suite.empty()) {
    if (a.suite != eval::kSuiteName) throw BadInput("unknown suite '" + a.suite + "' (valid: " + eval::kSuiteName + ")");
    if (a.data_dir.empty()) throw BadInput("--suite needs --data-dir DIR (one file per task; docs/evaluation.md)");
    if (!a.data.empty()) throw BadInput("--suite reads its files from --data-dir, not --data");
  } else if (!a.data_dir.empty()) {
    throw BadInput("--data-dir is read only with --suite");
  }
  if (a.model.empty() || (a.suite.empty() && a.data.empty()))
    throw BadInput("eval needs MODEL and --data FILE (or --suite open-medical-llm --data-dir DIR, or --compare RUN_A RUN_B)");
}

// Every question file is read and checked before the model is loaded: a bad record is found in
// a second, not after minutes of scoring the tasks before it.
std::vector<EvalJob> read_jobs(const EvalArgs& a) {
  std::vector<EvalJob> jobs;
  eval::McqTaskOptions topt;
  topt.cop_base = a.cop_base;
  topt.skip_invalid = a.skip_invalid;
  if (!a.suite.empty()) {
    const auto files = eval::find_suite_files(a.data_dir);
    for (size_t i = 0; i < files.size(); ++i) {
      const auto& task = eval::open_medical_llm_tasks()[i];
      jobs.push_back({&task, files[i], a.out + "/" + task.name, eval::read_task_questions(task, files[i], topt)});
    }
  } else if (!a.task.empty()) {
    const auto& task = eval::task_spec(a.task);
    jobs.push_back({&task, a.data, a.out, eval::read_task_questions(task, a.data, topt)});
  } else {
    jobs.push_back({nullptr, a.data, a.out, eval::read_mcq_jsonl(a.data, a.skip_invalid)});
  }
  for (auto& job : jobs) {
    // --limit applies per task.
    if (a.limit > 0 && static_cast<int64_t>(job.set.items.size()) > a.limit)
      job.set.items.resize(static_cast<size_t>(a.limit));
    if (job.set.skipped > 0)
      std::cerr << "medtune: skipped " << job.set.skipped << " invalid record(s) of " << job.data << "; first: "
                << job.set.skip_reasons.front() << "\n";
  }
  return jobs;
}

void print_summary(const eval::Metrics& metrics, double seconds, size_t questions, const std::string& out) {
  const auto& acc = metrics.accuracy;
  std::printf("accuracy    %.1f%% (%lld/%lld), 95%% CI %.1f-%.1f%%\n", 100 * acc.value,
              static_cast<long long>(acc.correct), static_cast<long long>(acc.n), 100 * acc.ci95.lo,
              100 * acc.ci95.hi);
  if (metrics.has_acc_norm) std::printf("acc_norm    %.1f%%\n", 100 * metrics.acc_norm.value);
  std::printf("letter prior %.1f%% (always answering the most common gold letter)\n", 100 * metrics.prior.accuracy);
  if (metrics.indistinguishable_from_prior)
    std::printf("WARNING     the interval reaches the letter-prior baseline: not distinguishable from guessing\n");
  std::printf("speed       %.2f questions/s (%d threads)\nreport      %s/%s\n", static_cast<double>(questions) / seconds,
              omp_get_max_threads(), out.c_str(), eval::kReportHtmlName);
}

// Under mpirun (dist/launch.h): rank r scores the r-th contiguous share of the questions, and
// every rank gets all results back in question order, each question scored exactly as one
// process scores it (on the CPU one question at a time, so the bits do not depend on the split).
std::vector<eval::QuestionResult> score_share(dist::Communicator& comm, model::LlamaModel& model,
                                              const eval::PromptRenderer& prompts,
                                              const std::vector<eval::McqItem>& items, eval::Scoring scoring,
                                              const std::function<void(size_t, size_t)>& progress) {
  if (comm.size() == 1) return eval::score_questions(model, prompts, items, scoring, progress);
  const size_t n = items.size();
  const dist::Share share = dist::share_of(n, comm);
  const std::vector<eval::McqItem> mine(items.begin() + static_cast<std::ptrdiff_t>(share.begin),
                                        items.begin() + static_cast<std::ptrdiff_t>(share.end));
  std::string lines;
  for (const auto& q : eval::score_questions(model, prompts, mine, scoring, progress))
    lines += eval::question_result_json(q).dump() + "\n";
  std::vector<eval::QuestionResult> all;
  const auto shares = comm.allgather(lines, "the evaluation results");
  for (size_t from = 0; from < shares.size(); ++from) {
    std::istringstream in(shares[from]);
    std::string line;
    while (std::getline(in, line))
      all.push_back(eval::question_result_from_json(nlohmann::json::parse(line), "rank " + std::to_string(from)));
  }
  if (all.size() != n) throw Internal("eval: the ranks returned " + std::to_string(all.size()) + " results for " + std::to_string(n) + " questions");
  return all;
}

void run_eval(const EvalArgs& a) {
  check_option_combinations(a);
  dist::Communicator& comm = dist::world();
  const bool lead = comm.rank() == 0;  // rank 0 alone writes the report and prints
  // Several ranks on one machine share its cores (unless -t chose another count) and its GPUs.
  if (comm.local_size() > 1 && omp_get_max_threads() == omp_get_num_procs())
    omp_set_num_threads(dist::default_threads(comm.local_size()));
  EvalArgs local_args = a;
  if (comm.local_size() > 1 && a.device == "gpu") local_args.device = "gpu:" + std::to_string(comm.local_rank());
  // Where the report goes is checked before minutes of scoring, not after (and created only
  // when there is a report to write).
  io::check_output_dir(a.out, "--out");
  const backend::Device device = backend::parse_device(local_args.device, "--device");
  backend::Backend& be = backend::for_device(device, backend::parse_precision(a.precision, device, "--precision"));
  auto jobs = read_jobs(a);

  auto ckpt = io::open_checkpoint(a.model);
  if (a.check_tensors) model::check_weights_finite(ckpt);
  const auto tok = open_tokenizer(ckpt);
  std::optional<tokenizer::ChatTemplate> chat;
  if (a.format == "chat" && a.task.empty() && a.suite.empty()) {
    const auto src = find_chat_template(ckpt);
    chat.emplace(src.text, src.origin);
  }
  model::LlamaModel model(std::move(ckpt), model::parse_weight_quant(a.base_quant, "--base-quant"), be);
  const auto lora = attach_adapter(model, a.adapter);
  // Digests are streamed once (a few seconds for multi-GB models) and shared by every sub-run.
  const auto model_files = eval::file_digests_json(io::model_files(a.model));
  const nlohmann::json adapter_files =
      a.adapter.empty() ? nlohmann::json() : eval::file_digests_json(eval::adapter_files(a.adapter));

  std::vector<eval::SuiteTaskResult> suite_results;
  const auto suite_t0 = std::chrono::steady_clock::now();
  for (auto& job : jobs) {
    const auto t0 = std::chrono::steady_clock::now();
    eval::PromptOptions popt;
    popt.format = eval::parse_prompt_format(job.task ? "lm_eval" : a.format);
    popt.system_prompt = a.system_prompt;
    popt.fewshot_k = a.fewshot;
    popt.fewshot_pool = a.fewshot_pool;
    popt.fewshot_seed = a.fewshot_seed;
    popt.custom_template_path = a.prompt_template;
    popt.task = job.task;
    // Only a single --data run has a chat template (tasks use lm-eval's prompts), so the one job
    // takes it.
    eval::PromptRenderer prompts(popt, *tok, std::exchange(chat, std::nullopt));
    prompts.draw_fewshot(job.set);
    const std::string scoring_name = job.task ? (job.task->scores_option_text ? "text" : "letter") : a.scoring;
    const eval::Scoring scoring = eval::parse_scoring(scoring_name);
    const std::string label = job.task ? job.task->name + ": " : "";

    const bool show = !a.quiet && lead;
    const auto results = score_share(comm, model, prompts, job.set.items, scoring, [&](size_t done, size_t total) {
      if (show && (done % 10 == 0 || done == total))
        std::cerr << "\r" << label << "scored " << done << "/" << total << (comm.size() > 1 ? " (rank 0's share)" : "")
                  << std::flush;
    });
    if (show) std::cerr << "\n";
    int64_t truncated = 0;
    for (const auto& r : results) truncated += r.truncated_tokens > 0 ? 1 : 0;
    if (truncated > 0 && lead)
      std::cerr << "medtune: note: " << label << truncated << " question(s) longer than the model's context ("
                << model.config().max_position_embeddings
                << " tokens) were cut from the left, as lm-eval does; predictions.jsonl marks them (truncated_tokens)\n";
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const eval::Metrics metrics = eval::compute_metrics(results, job.set.num_options);
    nlohmann::json prov;
    prov["model"] = std::filesystem::absolute(a.model).string();
    // The exact bytes behind the numbers: SHA-256 of every file read, re-checkable with sha256sum.
    prov["model_files"] = model_files;
    prov["adapter"] = a.adapter.empty() ? "none" : std::filesystem::absolute(a.adapter).string();
    if (!a.adapter.empty()) prov["adapter_files"] = adapter_files;
    prov["data"] = std::filesystem::absolute(job.data).string();
    std::vector<std::string> data_files{job.data};
    if (a.fewshot > 0) data_files.push_back(a.fewshot_pool);
    if (!a.prompt_template.empty()) data_files.push_back(a.prompt_template);
    prov["data_files"] = eval::file_digests_json(data_files);
    prov["command_line"] = eval::process_command_line();
    prov["data_questions"] = job.set.items.size();
    prov["data_skipped_invalid"] = job.set.skipped;
    prov["truncated_questions"] = truncated;
    prov["weights_checked_finite"] = a.check_tensors;
    if (job.task) {
      prov["task"] = job.task->name;
      prov["task_definition"] = "lm-evaluation-harness task " + job.task->name + ": its doc_to_text, doc_to_choice, "
                                "doc_to_target, zero-shot, metric acc";
    }
    prov["prompt_format"] = job.task ? "task" : a.format;
    if (popt.format == eval::PromptFormat::chat) prov["system_prompt"] = a.system_prompt;
    prov["fewshot"] = a.fewshot;
    if (a.fewshot > 0) {
      prov["fewshot_seed"] = a.fewshot_seed;
      prov["fewshot_sampling"] = "per question, as lm-evaluation-harness: random.Random(seed).sample(pool, k) in question order";
    }
    prov["scoring"] = scoring_name;
    prov["medtune_version"] = MEDTUNE_VERSION;
    prov["device"] = be.device().str();
    prov["backend"] = be.describe();
    prov["precision"] = backend::precision_name(be.precision());
    if (be.device().is_cpu()) prov["cpu_kernel_path"] = isa_name(active_isa());  // core/cpu_features.h
    prov["threads"] = omp_get_max_threads();
    if (comm.size() > 1) prov["world_size"] = comm.size();
    prov["seconds"] = seconds;
    prov["questions_per_second"] = static_cast<double>(results.size()) / seconds;
    const auto report = eval::make_report(metrics, prov);
    if (!lead) {
      if (a.suite.empty()) return;
      suite_results.push_back({job.task, job.data, metrics});
      continue;
    }

    io::prepare_output_dir(job.out, "--out");
    eval::write_report_json(job.out + "/" + eval::kReportJsonName, report);
    eval::write_predictions_jsonl(job.out + "/" + eval::kPredictionsName, results);
    io::atomic_write_file(job.out + "/" + eval::kReportHtmlName, eval::render_html_report(report));
    if (a.suite.empty()) {
      if (a.json) std::cout << report.dump(2) << "\n";
      else print_summary(metrics, seconds, results.size(), job.out);
      return;
    }
    suite_results.push_back({job.task, job.data, metrics});
  }

  nlohmann::json prov;
  prov["model"] = std::filesystem::absolute(a.model).string();
  prov["model_files"] = model_files;
  prov["adapter"] = a.adapter.empty() ? "none" : std::filesystem::absolute(a.adapter).string();
  if (!a.adapter.empty()) prov["adapter_files"] = adapter_files;
  prov["data_dir"] = std::filesystem::absolute(a.data_dir).string();
  prov["limit_per_task"] = a.limit;
  prov["command_line"] = eval::process_command_line();
  prov["medtune_version"] = MEDTUNE_VERSION;
  prov["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - suite_t0).count();
  if (!lead) return;
  const auto suite = eval::suite_report(suite_results, prov);
  const std::string markdown = eval::render_suite_markdown(suite);
  eval::write_report_json(a.out + "/" + eval::kSuiteJsonName, suite);
  io::atomic_write_file(a.out + "/" + eval::kSuiteMarkdownName, markdown);
  if (a.json) std::cout << suite.dump(2) << "\n";
  else std::cout << markdown << "\nreport      " << a.out << "/" << eval::kSuiteMarkdownName << "\n";
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Score multiple-choice questions (MedQA) by log-likelihood and write a report");
  cmd->add_option("MODEL", a->model, "Hugging Face directory or .gguf file");
  cmd->add_option("--data", a->data, "Questions: JSONL (MedQA and its common variants); with --task, that task's published layouts");
  cmd->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory to apply");
  cmd->add_option("--base-quant", a->base_quant,
                  "Quantize the base's block linears at load: none | nf4 (bitsandbytes NF4, as QLoRA)")
      ->capture_default_str();
  cmd->add_option("--device", a->device, "Where to compute: cpu | gpu | gpu:N (a GPU build; docs/gpu.md)")
      ->capture_default_str();
  cmd->add_option("--precision", a->precision, "Linear layers' arithmetic: fp32 | bf16 | int8 | auto (bf16 on a GPU; int8: CPU, Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/NF4 weights)")
      ->capture_default_str();
  CLI::Option* out = cmd->add_option("--out", a->out,
                                     "Directory for report.json, report.html, predictions.jsonl "
                                     "(with --compare: comparison.html, the training curves)")
                         ->capture_default_str();
  CLI::Option* format = cmd->add_option("--format", a->format, "Prompt format: lm_eval | chat | custom")->capture_default_str();
  CLI::Option* scoring =
      cmd->add_option("--scoring", a->scoring, "letter (option letters) | text (option texts: acc and acc_norm)")
          ->capture_default_str();
  cmd->add_option("--task", a->task,
                  "An lm-eval task, its prompt and choices exactly: medqa_4options | medmcqa | pubmedqa | mmlu_anatomy | "
                  "mmlu_clinical_knowledge | mmlu_college_biology | mmlu_college_medicine | mmlu_medical_genetics | "
                  "mmlu_professional_medicine");
  cmd->add_option("--suite", a->suite, "All nine Open Medical-LLM tasks: open-medical-llm (with --data-dir)");
  cmd->add_option("--data-dir", a->data_dir, "The suite's files, one per task: <task>.jsonl | .json | .csv");
  CLI::Option* cop_base = cmd->add_option("--medmcqa-cop-base", a->cop_base,
                                          "MedMCQA's cop counts from 0 (HF dataset) or 1 (original release); "
                                          "default: detected from the file")
                              ->check(CLI::IsMember({0, 1}));
  CLI::Option* system = cmd->add_option("--system", a->system_prompt, "System prompt (chat format)");
  CLI::Option* tmpl = cmd->add_option("--prompt-template", a->prompt_template,
                                      "Custom prompt file with {question} {options} {A}.. placeholders (--format custom)");
  cmd->add_option("--fewshot", a->fewshot, "Number of solved examples before each question")->check(integer_in(0, 1000));
  CLI::Option* pool = cmd->add_option("--fewshot-pool", a->fewshot_pool, "JSONL the few-shot examples are drawn from");
  cmd->add_option("--fewshot-seed", a->fewshot_seed, "Seed of the few-shot draw (lm-eval's fewshot_random_seed)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--limit", a->limit, "Score only the first N questions (N >= 1; per task with --suite)")->check(integer_in(1));
  cmd->add_flag("--skip-invalid", a->skip_invalid, "Count and skip malformed records instead of stopping");
  cmd->add_flag("--json", a->json, "Print the report as JSON");
  cmd->add_flag("--check-tensors,!--no-check-tensors", a->check_tensors,
                "Check every weight for NaN/Inf before scoring (default: on; one pass over the model)");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress on stderr");
  cmd->add_option("--compare", a->compare, "Compare two runs (directories or predictions.jsonl): RUN_A RUN_B")->expected(2);
  cmd->callback([a, system, tmpl, pool, out, format, scoring, cop_base] {
    a->format_given = format->count() > 0;
    a->scoring_given = scoring->count() > 0;
    a->cop_base_given = cop_base->count() > 0;
    a->system_given = system->count() > 0;
    a->out_given = out->count() > 0;
    a->template_given = tmpl->count() > 0;
    a->pool_given = pool->count() > 0;
    if (!a->compare.empty()) {
      run_compare(*a);
    } else {
      run_eval(*a);
    }
  });
}

}  // namespace medtune::cli
