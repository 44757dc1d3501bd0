#include "train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <span>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/peft_adapter.h"
#include "model/lora_peft.h"
#include "model/train_step.h"
#include "train/batcher.h"
#include "train/grad_clip.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
#include "train/progress.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Installs the stop handlers for the lifetime of a run and restores the previous ones.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    prev_int_ = std::signal(SIGINT, on_stop_signal);
    prev_term_ = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, prev_int_);
    std::signal(SIGTERM, prev_term_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*prev_int_)(int) = SIG_DFL;
  void (*prev_term_)(int) = SIG_DFL;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Walks the micro-batches of successive epochs; epoch plans are made as they are reached.
class BatchCursor {
 public:
  BatchCursor(std::vector<int64_t> lengths, BatchPlanOptions opt)
      : lengths_(std::move(lengths)), opt_(opt) {}
  const std::vector<int64_t>& next() {
    if (pos_ >= plan_.size()) {
      plan_ = plan_epoch(lengths_, opt_, epoch_++);
      pos_ = 0;
    }
    ++consumed_;
    return plan_[pos_++];
  }
  int64_t consumed() const { return consumed_; }

 private:
  std::vector<int64_t> lengths_;
  BatchPlanOptions opt_;
  std::vector<std::vector<int64_t>> plan_;
  size_t pos_ = 0;
  int64_t epoch_ = 0;
  int64_t consumed_ = 0;
};

std::vector<ParamRef> lora_params(model::LoraWeights& lora) {
  std::vector<ParamRef> params;
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (int p = 0; p < model::kNumProj; ++p) {
      auto& ll = lora.layers[l][static_cast<size_t>(p)];
      if (!ll.enabled()) continue;
      const std::string name = model::proj_module_path(static_cast<int64_t>(l), static_cast<model::Proj>(p));
      params.push_back({name + ".lora_A", ll.A.data(), ll.dA.data(), static_cast<int64_t>(ll.A.size())});
      params.push_back({name + ".lora_B", ll.B.data(), ll.dB.data(), static_cast<int64_t>(ll.B.size())});
    }
  return params;
}

std::vector<std::span<float>> lora_grads(model::LoraWeights& lora) {
  std::vector<std::span<float>> g;
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      if (ll.enabled()) {
        g.emplace_back(ll.dA);
        g.emplace_back(ll.dB);
      }
  return g;
}

void save_adapter(const model::LoraWeights& lora, const TrainConfig& cfg, const std::string& dir) {
  const io::PeftAdapter adapter = model::lora_to_peft(lora, cfg.base_model);
  write_peft_adapter(dir, adapter, {});
}

// Keeps the newest save_total_limit checkpoint-<step> folders.
void prune_checkpoints(const TrainConfig& cfg) {
  if (cfg.save_total_limit <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& e : fs::directory_iterator(cfg.output_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("checkpoint-", 0) != 0) continue;
    try {
      found.emplace_back(std::stoll(name.substr(11)), e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(found.begin(), found.end());
  while (static_cast<int64_t>(found.size()) > cfg.save_total_limit) {
    fs::remove_all(found.front().second);
    found.erase(found.begin());
  }
}

}  // namespace

void request_stop() { g_stop_signal = SIGINT; }

StepPlan plan_steps(const TrainConfig& cfg, int64_t num_train_examples) {
  StepPlan p;
  p.batches_per_epoch = (num_train_examples + cfg.micro_batch_size - 1) / cfg.micro_batch_size;
  if (cfg.max_steps > 0) {
    p.total_steps = cfg.max_steps;
  } else {
    const double micro = cfg.num_epochs * static_cast<double>(p.batches_per_epoch);
    p.total_steps = static_cast<int64_t>(std::ceil(micro / static_cast<double>(cfg.gradient_accumulation_steps)));
  }
  p.total_steps = std::max<int64_t>(p.total_steps, 1);
  p.warmup_steps = cfg.warmup_ratio
                       ? static_cast<int64_t>(std::ceil(*cfg.warmup_ratio * static_cast<double>(p.total_steps)))
                       : cfg.warmup_steps;
  return p;
}

EvalPoint validation_loss(model::LlamaModel& model, const std::vector<Example>& examples,
                          int64_t micro_batch_size, int32_t pad_id) {
  EvalPoint e;
  double sum = 0;
  for (size_t i = 0; i < examples.size(); i += static_cast<size_t>(micro_batch_size)) {
    std::vector<int64_t> idx;
    for (size_t j = i; j < std::min(examples.size(), i + static_cast<size_t>(micro_batch_size)); ++j)
      idx.push_back(static_cast<int64_t>(j));
    const auto r = model::forward_loss(model, make_batch(examples, idx, false, pad_id));
    sum += r.loss_sum;
    e.tokens += r.tokens;
  }
  e.loss = e.tokens > 0 ? sum / static_cast<double>(e.tokens) : 0.0;
  return e;
}

TrainSummary run_training(const TrainConfig& cfg, model::LlamaModel& model, const TrainData& data,
                          const TrainHooks& hooks, std::ostream& log) {
  if (cfg.sample_packing)
    throw BadInput("sample_packing is not supported yet (attention would need per-example masks)");
  if (data.train.empty()) throw BadInput("datasets: no training examples");
  if (!cfg.resume_from_checkpoint.empty())
    throw BadInput("resume_from_checkpoint is not supported yet (checkpoints hold the adapter only, "
                   "not the AdamW moments and data position a bit-exact resume needs)");
  if (cfg.num_threads > 0) omp_set_num_threads(static_cast<int>(cfg.num_threads));
  const auto t0 = Clock::now();
  StopSignals signals;

  fs::create_directories(cfg.output_dir);
  io::atomic_write_file((fs::path(cfg.output_dir) / "config_resolved.json").string(), to_json(cfg).dump(2) + "\n");
  MetricsLog metrics((fs::path(cfg.output_dir) / "metrics.jsonl").string());
  Progress progress(log, std::cerr, isatty(STDERR_FILENO) != 0);
  for (const auto& w : cfg.warnings) progress.message("warning: " + w);

  model::LoraWeights lora = model::init_lora(model.config(), lora_config(cfg), static_cast<uint64_t>(cfg.seed));
  model.set_lora(&lora);
  struct Unset {
    model::LlamaModel& m;
    ~Unset() { m.set_lora(nullptr); }
  } unset{model};
  AdamW adamw(adamw_config(cfg), lora_params(lora));
  const std::vector<std::span<float>> grads_mut = lora_grads(lora);
  const std::span<const std::span<float>> grads(grads_mut);

  const StepPlan plan = plan_steps(cfg, static_cast<int64_t>(data.train.size()));
  ScheduleConfig sched;
  sched.kind = cfg.lr_scheduler;
  sched.base_lr = cfg.learning_rate;
  sched.num_warmup_steps = plan.warmup_steps;
  sched.num_training_steps = plan.total_steps;
  validate(sched);

  TrainSummary sum;
  sum.total_steps = plan.total_steps;
  {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "training: %zu examples (%zu validation), %lld micro-batches/epoch, %lld steps "
                  "(%lld warmup), %lld LoRA parameters",
                  data.train.size(), data.val.size(), static_cast<long long>(plan.batches_per_epoch),
                  static_cast<long long>(plan.total_steps), static_cast<long long>(plan.warmup_steps),
                  static_cast<long long>(lora.num_parameters()));
    progress.message(buf);
  }

  auto evaluate = [&](int64_t step) {
    if (data.val.empty() && !hooks.letter_accuracy) return;
    EvalPoint e;
    if (!data.val.empty()) e = validation_loss(model, data.val, cfg.micro_batch_size, data.pad_id);
    e.step = step;
    if (hooks.letter_accuracy) e.accuracy = hooks.letter_accuracy();
    nlohmann::json j{{"step", step}, {"loss", e.loss}, {"tokens", e.tokens}};
    if (e.accuracy) j["accuracy"] = *e.accuracy;
    metrics.write({{"eval", j}});
    char buf[160];
    std::snprintf(buf, sizeof buf, "eval @ step %lld: loss %.4f", static_cast<long long>(step), e.loss);
    std::string line = buf;
    if (e.accuracy) {
      std::snprintf(buf, sizeof buf, ", letter accuracy %.4f", *e.accuracy);
      line += buf;
    }
    progress.message(line);
    sum.evals.push_back(e);
  };
  if (cfg.eval_steps > 0) evaluate(0);

  std::vector<int64_t> lengths;
  for (const auto& ex : data.train) lengths.push_back(ex.length());
  BatchCursor cursor(lengths, {cfg.micro_batch_size, cfg.group_by_length, static_cast<uint64_t>(cfg.seed)});
  const auto train_start = Clock::now();
  int64_t step = 0;
  sum.stop_reason = "completed";
  for (; step < plan.total_steps; ++step) {
    if (g_stop_signal != 0) {
      sum.stop_reason = "signal";
      break;
    }
    if (cfg.max_runtime_s > 0 && seconds_since(t0) > static_cast<double>(cfg.max_runtime_s)) {
      sum.stop_reason = "max_runtime";
      break;
    }
    // Build all micro-batches of the step first: the loss is normalised by their total targets.
    std::vector<model::TrainBatch> micro;
    int64_t step_targets = 0;
    for (int64_t a = 0; a < cfg.gradient_accumulation_steps; ++a) {
      micro.push_back(make_batch(data.train, cursor.next(), cfg.train_on_inputs, data.pad_id));
      step_targets += count_targets(micro.back());
      for (uint8_t m : micro.back().mask) sum.input_tokens += m;
    }
    lora.zero_grad();
    model::TrainOptions opt;
    opt.loss_scale = step_targets > 0 ? 1.0 / static_cast<double>(step_targets) : 0.0;
    opt.gradient_checkpointing = cfg.gradient_checkpointing;
    opt.dropout_seed = cfg.lora_dropout > 0 ? mix_seed(static_cast<uint64_t>(cfg.seed), static_cast<uint64_t>(step + 1)) : 0;
    double loss_sum = 0;
    for (const auto& b : micro) loss_sum += model::forward_backward(model, lora, b, opt).loss_sum;
    const double grad_norm = cfg.max_grad_norm > 0 ? clip_grad_norm(grads, cfg.max_grad_norm) : global_grad_norm(grads);
    const double lr = lr_at(sched, step);
    adamw.step(lr);

    const double loss = step_targets > 0 ? loss_sum / static_cast<double>(step_targets) : 0.0;
    sum.losses.push_back(loss);
    sum.tokens += step_targets;
    sum.final_loss = loss;
    const int64_t done = step + 1;
    const double train_s = seconds_since(train_start);
    ProgressState ps{done, plan.total_steps, loss, lr,
                     train_s > 0 ? static_cast<double>(sum.input_tokens) / train_s : 0.0, seconds_since(t0), rss_bytes()};
    if (!std::isfinite(loss) || !std::isfinite(grad_norm))
      progress.message("warning: step " + std::to_string(done) + ": non-finite loss or gradient norm");
    if (cfg.logging_steps > 0 && (done % cfg.logging_steps == 0 || done == plan.total_steps)) {
      metrics.write({{"step", done},
                     {"epoch", static_cast<double>(cursor.consumed()) / static_cast<double>(plan.batches_per_epoch)},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", grad_norm},
                     {"tokens_per_s", ps.tokens_per_s},
                     {"elapsed_s", ps.elapsed_s},
                     {"rss_bytes", ps.rss_bytes}});
      progress.update(ps);
    }
    if (cfg.save_steps > 0 && done % cfg.save_steps == 0 && done < plan.total_steps) {
      const std::string dir = (fs::path(cfg.output_dir) / ("checkpoint-" + std::to_string(done))).string();
      save_adapter(lora, cfg, dir);
      prune_checkpoints(cfg);
      progress.message("saved " + dir);
    }
    if (cfg.eval_steps > 0 && done % cfg.eval_steps == 0 && done < plan.total_steps) evaluate(done);
  }
  sum.steps = step;
  progress.finish();

  // The final evaluation: what the user reads. Skipped on a stop (signal or max_runtime): the user
  // or the time limit asked for the run to end now, and an evaluation can take minutes.
  // eval_steps 0 means never (train_config warns when a validation set is then unused).
  if (cfg.eval_steps > 0 && sum.stop_reason == "completed" &&
      (sum.evals.empty() || sum.evals.back().step != step))
    evaluate(step);
  sum.adapter_dir = (fs::path(cfg.output_dir) / "adapter").string();
  save_adapter(lora, cfg, sum.adapter_dir);
  if (cfg.save_steps > 0) {
    save_adapter(lora, cfg, (fs::path(cfg.output_dir) / ("checkpoint-" + std::to_string(step))).string());
    prune_checkpoints(cfg);
  }
  sum.elapsed_s = seconds_since(t0);
  if (sum.stop_reason == "signal")
    progress.message("stopped by signal after step " + std::to_string(step) + "; adapter saved to " + sum.adapter_dir);
  else if (sum.stop_reason == "max_runtime")
    progress.message("stopped at max_runtime after step " + std::to_string(step) + "; adapter saved to " + sum.adapter_dir);
  metrics.write({{"summary", {{"steps", sum.steps},
                              {"total_steps", sum.total_steps},
                              {"tokens", sum.tokens},
                              {"input_tokens", sum.input_tokens},
                              {"final_loss", sum.final_loss},
                              {"elapsed_s", sum.elapsed_s},
                              {"stop_reason", sum.stop_reason}}}});
  return sum;
}

}  // namespace medtune::train
