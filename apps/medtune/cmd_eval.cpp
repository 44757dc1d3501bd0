// medtune eval MODEL --data FILE [options]   score multiple-choice questions, write a report
// medtune eval --compare RUN_A RUN_B          before/after on the same questions (exact McNemar)
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "adapter_loading.h"
#include "cli_checks.h"
#include "commands.h"
#include "backend/backend.h"
#include "core/error.h"
#include "eval/compare.h"
#include "eval/medqa.h"
#include "eval/metrics.h"
#include "eval/prompt.h"
#include "eval/report_html.h"
#include "eval/report_json.h"
#include "eval/run_provenance.h"
#include "eval/scorer.h"
#include "eval/training_comparison.h"
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
  std::vector<std::string> compare;
};

void run_compare(const EvalArgs& a) {
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

void run_eval(const EvalArgs& a) {
  if (a.model.empty() || a.data.empty()) throw BadInput("eval needs MODEL and --data FILE (or --compare RUN_A RUN_B)");
  // Options that would be silently ignored in this combination are refused instead.
  if (a.system_given && a.format != "chat")
    throw BadInput("--system is the chat format's system message: it needs --format chat (this run: " + a.format + ")");
  if (a.template_given && a.format != "custom")
    throw BadInput("--prompt-template is read only with --format custom (this run: " + a.format + ")");
  if (a.pool_given && a.fewshot == 0) throw BadInput("--fewshot-pool is used only with --fewshot N (N >= 1)");
  // Where the report goes is checked before minutes of scoring, not after (and created only
  // when there is a report to write).
  io::check_output_dir(a.out, "--out");
  const backend::Device device = backend::parse_device(a.device, "--device");
  backend::Backend& be = backend::for_device(device, backend::parse_precision(a.precision, device, "--precision"));
  const auto t0 = std::chrono::steady_clock::now();
  eval::McqSet set = eval::read_mcq_jsonl(a.data, a.skip_invalid);
  if (a.limit > 0 && static_cast<int64_t>(set.items.size()) > a.limit) set.items.resize(static_cast<size_t>(a.limit));
  if (set.skipped > 0)
    std::cerr << "medtune: skipped " << set.skipped << " invalid record(s) of " << a.data << "; first: "
              << set.skip_reasons.front() << "\n";

  auto ckpt = io::open_checkpoint(a.model);
  if (a.check_tensors) model::check_weights_finite(ckpt);
  const auto tok = open_tokenizer(ckpt);
  eval::PromptOptions popt;
  popt.format = eval::parse_prompt_format(a.format);
  popt.system_prompt = a.system_prompt;
  popt.fewshot_k = a.fewshot;
  popt.fewshot_pool = a.fewshot_pool;
  popt.fewshot_seed = a.fewshot_seed;
  popt.custom_template_path = a.prompt_template;
  std::optional<tokenizer::ChatTemplate> chat;
  if (popt.format == eval::PromptFormat::chat) {
    const auto src = find_chat_template(ckpt);
    chat.emplace(src.text, src.origin);
  }
  eval::PromptRenderer prompts(popt, *tok, std::move(chat));
  prompts.draw_fewshot(set);
  model::LlamaModel model(std::move(ckpt), model::parse_weight_quant(a.base_quant, "--base-quant"), be);
  const auto lora = attach_adapter(model, a.adapter);
  const eval::Scoring scoring = eval::parse_scoring(a.scoring);

  const auto results = eval::score_questions(model, prompts, set.items, scoring, [&](size_t done, size_t total) {
    if (!a.quiet && (done % 10 == 0 || done == total)) std::cerr << "\rscored " << done << "/" << total << std::flush;
  });
  if (!a.quiet) std::cerr << "\n";
  int64_t truncated = 0;
  for (const auto& r : results) truncated += r.truncated_tokens > 0 ? 1 : 0;
  if (truncated > 0)
    std::cerr << "medtune: note: " << truncated << " question(s) longer than the model's context ("
              << model.config().max_position_embeddings
              << " tokens) were cut from the left, as lm-eval does; predictions.jsonl marks them (truncated_tokens)\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const eval::Metrics metrics = eval::compute_metrics(results, set.num_options);
  nlohmann::json prov;
  prov["model"] = std::filesystem::absolute(a.model).string();
  // The exact bytes behind the numbers: SHA-256 of every file read (streamed; a few seconds
  // for multi-GB models), re-checkable with sha256sum.
  prov["model_files"] = eval::file_digests_json(io::model_files(a.model));
  prov["adapter"] = a.adapter.empty() ? "none" : std::filesystem::absolute(a.adapter).string();
  if (!a.adapter.empty()) prov["adapter_files"] = eval::file_digests_json(eval::adapter_files(a.adapter));
  prov["data"] = std::filesystem::absolute(a.data).string();
  std::vector<std::string> data_files{a.data};
  if (a.fewshot > 0) data_files.push_back(a.fewshot_pool);
  if (!a.prompt_template.empty()) data_files.push_back(a.prompt_template);
  prov["data_files"] = eval::file_digests_json(data_files);
  prov["command_line"] = eval::process_command_line();
  prov["data_questions"] = set.items.size();
  prov["data_skipped_invalid"] = set.skipped;
  prov["truncated_questions"] = truncated;
  prov["weights_checked_finite"] = a.check_tensors;
  prov["prompt_format"] = a.format;
  if (popt.format == eval::PromptFormat::chat) prov["system_prompt"] = a.system_prompt;
  prov["fewshot"] = a.fewshot;
  if (a.fewshot > 0) {
    prov["fewshot_seed"] = a.fewshot_seed;
    prov["fewshot_sampling"] = "per question, as lm-evaluation-harness: random.Random(seed).sample(pool, k) in question order";
  }
  prov["scoring"] = a.scoring;
  prov["medtune_version"] = MEDTUNE_VERSION;
  prov["device"] = be.device().str();
  prov["backend"] = be.describe();
  prov["precision"] = backend::precision_name(be.precision());
  prov["threads"] = omp_get_max_threads();
  prov["seconds"] = seconds;
  prov["questions_per_second"] = static_cast<double>(results.size()) / seconds;
  const auto report = eval::make_report(metrics, prov);

  io::prepare_output_dir(a.out, "--out");
  eval::write_report_json(a.out + "/" + eval::kReportJsonName, report);
  eval::write_predictions_jsonl(a.out + "/" + eval::kPredictionsName, results);
  io::atomic_write_file(a.out + "/" + eval::kReportHtmlName, eval::render_html_report(report));
  if (a.json) {
    std::cout << report.dump(2) << "\n";
    return;
  }
  const auto& acc = metrics.accuracy;
  std::printf("accuracy    %.1f%% (%lld/%lld), 95%% CI %.1f-%.1f%%\n", 100 * acc.value,
              static_cast<long long>(acc.correct), static_cast<long long>(acc.n), 100 * acc.ci95.lo,
              100 * acc.ci95.hi);
  if (metrics.has_acc_norm) std::printf("acc_norm    %.1f%%\n", 100 * metrics.acc_norm.value);
  std::printf("letter prior %.1f%% (always answering the most common gold letter)\n", 100 * metrics.prior.accuracy);
  if (metrics.indistinguishable_from_prior)
    std::printf("WARNING     the interval reaches the letter-prior baseline: not distinguishable from guessing\n");
  std::printf("speed       %.2f questions/s (%d threads)\nreport      %s/%s\n",
              static_cast<double>(results.size()) / seconds, omp_get_max_threads(), a.out.c_str(),
              eval::kReportHtmlName);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Score multiple-choice questions (MedQA) by log-likelihood and write a report");
  cmd->add_option("MODEL", a->model, "Hugging Face directory or .gguf file");
  cmd->add_option("--data", a->data, "Questions, JSONL (MedQA and its common variants)");
  cmd->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory to apply");
  cmd->add_option("--base-quant", a->base_quant,
                  "Quantize the base's block linears at load: none | nf4 (bitsandbytes NF4, as QLoRA)")
      ->capture_default_str();
  cmd->add_option("--device", a->device, "Where to compute: cpu | gpu | gpu:N (a GPU build; docs/gpu.md)")
      ->capture_default_str();
  cmd->add_option("--precision", a->precision, "Linear layers' arithmetic: fp32 | bf16 | auto (bf16 on a GPU)")
      ->capture_default_str();
  CLI::Option* out = cmd->add_option("--out", a->out,
                                     "Directory for report.json, report.html, predictions.jsonl "
                                     "(with --compare: comparison.html, the training curves)")
                         ->capture_default_str();
  cmd->add_option("--format", a->format, "Prompt format: lm_eval | chat | custom")->capture_default_str();
  cmd->add_option("--scoring", a->scoring, "letter (option letters) | text (option texts: acc and acc_norm)")->capture_default_str();
  CLI::Option* system = cmd->add_option("--system", a->system_prompt, "System prompt (chat format)");
  CLI::Option* tmpl = cmd->add_option("--prompt-template", a->prompt_template,
                                      "Custom prompt file with {question} {options} {A}.. placeholders (--format custom)");
  cmd->add_option("--fewshot", a->fewshot, "Number of solved examples before each question")->check(integer_in(0, 1000));
  CLI::Option* pool = cmd->add_option("--fewshot-pool", a->fewshot_pool, "JSONL the few-shot examples are drawn from");
  cmd->add_option("--fewshot-seed", a->fewshot_seed, "Seed of the few-shot draw (lm-eval's fewshot_random_seed)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--limit", a->limit, "Score only the first N questions (N >= 1)")->check(integer_in(1));
  cmd->add_flag("--skip-invalid", a->skip_invalid, "Count and skip malformed records instead of stopping");
  cmd->add_flag("--json", a->json, "Print the report as JSON");
  cmd->add_flag("--check-tensors,!--no-check-tensors", a->check_tensors,
                "Check every weight for NaN/Inf before scoring (default: on; one pass over the model)");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress on stderr");
  cmd->add_option("--compare", a->compare, "Compare two runs (directories or predictions.jsonl): RUN_A RUN_B")->expected(2);
  cmd->callback([a, system, tmpl, pool, out] {
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
