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

#include "backend/backend.h"
#include "core/error.h"
#include "dist/gradient_sum.h"
#include "dist/launch.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/peft_adapter.h"
#include "io/provenance.h"
#include "model/lora_peft.h"
#include "model/train_step.h"
#include "train/batch_cursor.h"
#include "train/batcher.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_identity.h"
#include "train/checkpoint_state.h"
#include "train/grad_clip.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/resume.h"
#include "train/resume_sync.h"
#include "train/run_manifest.h"
#include "train/tensorboard_sink.h"
#include "train/train_state.h"

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

// "NaN", "Inf", "-Inf" spelled the same on every libc (printf gives "nan" or "-nan").
std::string number_text(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// manifest.json's "run" and metrics.jsonl's closing "summary": what every ending records.
nlohmann::json run_record(const TrainSummary& sum, const std::string& started) {
  return {{"started", started},
          {"finished", utc_timestamp_now()},
          {"status", sum.stop_reason},
          {"elapsed_s", sum.elapsed_s},
          {"steps", sum.steps},
          {"total_steps", sum.total_steps},
          {"target_tokens", sum.tokens},
          {"skipped_steps", sum.skipped_steps},
          {"skipped_invalid_records", sum.skipped_records}};
}
nlohmann::json summary_record(const TrainSummary& sum) {
  return {{"steps", sum.steps},
          {"total_steps", sum.total_steps},
          {"tokens", sum.tokens},
          {"input_tokens", sum.input_tokens},
          {"skipped_steps", sum.skipped_steps},
          {"elapsed_s", sum.elapsed_s},
          {"stop_reason", sum.stop_reason}};
}

// A diverged run ends here: the last good checkpoint stays as it is, no adapter is written (the
// weights in memory are the last finite ones, but not what the run was asked to produce), and the
// manifest and the metrics log say so.
TrainSummary finish_diverged(TrainSummary sum, nlohmann::json& manifest, const std::string& started,
                             MetricsLog& metrics, const std::string& output_dir, double elapsed_s) {
  sum.elapsed_s = elapsed_s;
  manifest["run"] = run_record(sum, started);
  manifest["run"]["diverged"] = sum.diverged;
  manifest["run"]["last_checkpoint"] =
      sum.checkpoint_dir.empty() ? nlohmann::json() : nlohmann::json(sum.checkpoint_dir);
  manifest["outputs"] = nlohmann::json::array();
  write_run_manifest(output_dir, manifest);
  nlohmann::json summary = summary_record(sum);
  summary["diverged"] = sum.diverged;
  metrics.write({{"summary", summary}});
  return sum;
}

// Start-up check of a job of several ranks: every rank must train the same config on the same
// model and data (a copy that differs on one machine would silently train something else).
// Compares each rank's identity with rank 0's; BadInput on every rank, naming the ranks and what
// differs.
void check_ranks_agree(dist::Communicator& comm, const RunIdentity& identity) {
  const auto all = comm.allgather(to_json(identity).dump(), "the start-up check of config, model and data");
  const RunIdentity first = identity_from_json(nlohmann::json::parse(all[0]), "rank 0's identity");
  std::string problems;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    for (const auto& d : identity_differences(first, identity_from_json(nlohmann::json::parse(all[r]), "rank identity")))
      problems += "\n  rank " + std::to_string(r) + " differs from rank 0: " + d;
  }
  if (!problems.empty())
    throw BadInput("the ranks of this job do not train the same run (every rank must get the same config, "
                   "overrides, model and data files):" + problems);
}

}  // namespace

void request_stop() { g_stop_signal = SIGINT; }

StepPlan plan_steps(const TrainConfig& cfg, int64_t num_train_examples) {
  if (cfg.sample_packing) throw Internal("plan_steps: with sample_packing the plan needs the examples' lengths");
  return plan_steps(cfg, std::vector<int64_t>(static_cast<size_t>(num_train_examples), 0));
}

StepPlan plan_steps(const TrainConfig& cfg, const std::vector<int64_t>& lengths) {
  StepPlan p;
  p.batches_per_epoch = micro_batches_per_epoch(lengths, batch_plan_options(cfg));
  if (cfg.max_steps > 0) {
    p.total_steps = cfg.max_steps;
  } else {
    const double micro = cfg.num_epochs * static_cast<double>(p.batches_per_epoch);
    const double steps = std::ceil(micro / static_cast<double>(cfg.gradient_accumulation_steps));
    // Past int64 the conversion is undefined (it gave 1 step); far below it no run ends.
    constexpr double kMaxSteps = 1e9;
    if (!(steps <= kMaxSteps))
      throw BadInput("num_epochs " + number_text(cfg.num_epochs) + " of " + std::to_string(p.batches_per_epoch) +
                     " micro-batches is " + number_text(steps) + " optimizer steps, more than the " +
                     number_text(kMaxSteps) + " a run may plan");
    p.total_steps = static_cast<int64_t>(steps);
  }
  p.total_steps = std::max<int64_t>(p.total_steps, 1);
  p.warmup_steps = cfg.warmup_ratio
                       ? static_cast<int64_t>(std::ceil(*cfg.warmup_ratio * static_cast<double>(p.total_steps)))
                       : cfg.warmup_steps;
  return p;
}

EvalPoint validation_loss(model::LlamaModel& model, const std::vector<Example>& examples,
                          int64_t micro_batch_size, int32_t pad_id, dist::Communicator& comm) {
  const size_t mbs = static_cast<size_t>(micro_batch_size);
  const size_t batches = (examples.size() + mbs - 1) / mbs;
  // (2 x batches) batch b's loss sum at 2b, its target tokens at 2b+1; zero where another rank
  // computes it. Adding zeros is exact, so the all-reduce leaves each rank's numbers as they are
  // in whatever order the engine adds, and tokens (< 2^53) are exact in a double.
  std::vector<double> per_batch(2 * batches, 0.0);
  const dist::Share mine = dist::share_of(batches, comm);
  for (size_t b = mine.begin; b < mine.end; ++b) {
    std::vector<int64_t> idx;
    for (size_t j = b * mbs; j < std::min(examples.size(), (b + 1) * mbs); ++j) idx.push_back(static_cast<int64_t>(j));
    const auto r = model::forward_loss(model, make_batch(examples, idx, false, pad_id));
    per_batch[2 * b] = r.loss_sum;
    per_batch[2 * b + 1] = static_cast<double>(r.tokens);
  }
  if (comm.size() > 1) comm.allreduce_sum(std::span<double>(per_batch), "the validation losses");
  EvalPoint e;
  double sum = 0;
  for (size_t b = 0; b < batches; ++b) {  // in batch order, as one process adds them
    sum += per_batch[2 * b];
    e.tokens += static_cast<int64_t>(per_batch[2 * b + 1]);
  }
  e.loss = e.tokens > 0 ? sum / static_cast<double>(e.tokens) : 0.0;
  return e;
}

TrainSummary run_training(const TrainConfig& cfg, model::LlamaModel& model, const TrainData& data,
                          const TrainHooks& hooks, std::ostream& log) {
  if (data.train.empty()) throw BadInput("datasets: no training examples");
  dist::SingleProcess single_process;
  dist::Communicator& comm = hooks.comm != nullptr ? *hooks.comm : single_process;
  const int world = comm.size();
  const bool writer = comm.rank() == 0;  // rank 0 alone writes files and logs
  if (cfg.num_threads > 0)
    omp_set_num_threads(static_cast<int>(cfg.num_threads));
  else if (world > 1)
    omp_set_num_threads(dist::default_threads(comm.local_size()));
  const auto t0 = Clock::now();
  StopSignals signals;
  std::ostream silent(nullptr);  // the other ranks' log: one voice per job
  Progress progress(writer ? log : silent, std::cerr, writer && isatty(STDERR_FILENO) != 0);
  for (const auto& w : cfg.warnings) progress.message("warning: " + w);

  // ---- Phase 1: every check that can refuse the run. Nothing is written before it ends: a
  // refused command must leave a finished run's manifest, config and adapter as they were.
  io::check_output_dir(cfg.output_dir, "output_dir");

  // The run as one process sees it: world x gradient_accumulation_steps micro-batches per step.
  // Steps, data order and identity come from it, so that a checkpoint resumes at any world size
  // with the same global batch.
  TrainConfig global_cfg = cfg;
  global_cfg.gradient_accumulation_steps = cfg.gradient_accumulation_steps * world;

  // Hashed once per run: every checkpoint records it, and a resume compares it.
  const auto hash_start = Clock::now();
  const RunIdentity identity = compute_identity(global_cfg, data.train, data.val);
  if (world > 1) check_ranks_agree(comm, identity);
  {
    int64_t model_bytes = 0;
    for (const auto& f : identity.model_files) model_bytes += f.bytes;
    char buf[160];
    std::snprintf(buf, sizeof buf, "identity: hashed %zu model file(s) (%.1f MiB) and %zu data file(s) in %.1f s",
                  identity.model_files.size(), static_cast<double>(model_bytes) / (1024.0 * 1024.0),
                  identity.data_files.size(), seconds_since(hash_start));
    progress.message(buf);
  }

  model::LoraWeights lora = model::init_lora(model.config(), lora_config(cfg), static_cast<uint64_t>(cfg.seed));
  AdamW adamw(adamw_config(cfg), lora_params(lora));
  const std::vector<std::span<float>> grads = lora_grads(lora);  // host dA, dB: each micro-batch's, then the step's sum

  const StepPlan plan = plan_steps(global_cfg, example_lengths(data.train));
  ScheduleConfig sched;
  sched.kind = cfg.lr_scheduler;
  sched.base_lr = cfg.learning_rate;
  sched.num_warmup_steps = plan.warmup_steps;
  sched.num_training_steps = plan.total_steps;
  validate(sched);

  TrainSummary sum;
  sum.total_steps = plan.total_steps;
  sum.skipped_records = data.skipped_records;
  std::vector<int64_t> lengths;
  for (const auto& ex : data.train) lengths.push_back(ex.length());
  const BatchPlanOptions batch_opt = batch_plan_options(global_cfg);

  // Resume: everything the uninterrupted run would hold after checkpoint's step.
  // Rank 0 chooses it; each rank reads it where it is, or a copy received from rank 0 when
  // output_dir is not on a file system every rank sees (train/resume_sync.h).
  ResumeSource source =
      world > 1 ? agree_on_resume_point(comm, writer ? find_resume_point(cfg, progress) : std::nullopt,
                                        cfg.resume_from_checkpoint == "auto" ? cfg.output_dir : "")
                : ResumeSource(find_resume_point(cfg, progress));
  const std::optional<CheckpointEntry>& from = source.checkpoint();
  if (!source.received_by().empty()) {
    std::string ranks;
    for (int r : source.received_by()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    progress.message("resume: rank(s) " + ranks + " do not see " + source.chosen_path() +
                     " (output_dir is not shared with rank 0): sent them its files");
  }
  if (!from) refuse_earlier_run(cfg, hooks);
  TrainerState resumed;
  if (from) {
    resumed =
        read_resume_checkpoint(*from, identity, plan, hooks.force_resume, lora, adamw, progress);
    sum.tokens = resumed.tokens;
    sum.input_tokens = resumed.input_tokens;
    sum.losses = resumed.losses;
    sum.evals = resumed.evals;
    sum.skipped_steps = resumed.skipped_steps;
    if (!sum.losses.empty()) sum.final_loss = sum.losses.back();
    source.remove_received_copy();  // everything is read: the adapter, optimizer and trainer state
    sum.resumed_from = sum.checkpoint_dir = source.chosen_path();
    if (resumed.world_size != world)
      progress.message("resuming with " + std::to_string(world) + " rank(s) x " +
                       std::to_string(cfg.gradient_accumulation_steps) + " accumulation steps; " + from->path +
                       " was written by " + std::to_string(resumed.world_size) +
                       " rank(s): the same global batch of " + std::to_string(global_cfg.gradient_accumulation_steps) +
                       " micro-batches per step");
    if (resumed.num_threads != omp_get_max_threads())
      progress.message("warning: " + from->path + " was written with " + std::to_string(resumed.num_threads) +
                       " threads, this run has " + std::to_string(omp_get_max_threads()) +
                       ": it continues, but not bit-identically to an uninterrupted run");
  }
  BatchCursor cursor(lengths, batch_opt, resumed.cursor);
  if (from && cursor.state().plan_sha256 != resumed.cursor.plan_sha256) {
    const std::string msg = from->path + ": the data order of epoch " + std::to_string(resumed.cursor.epoch) +
                            " differs from the one the checkpoint was trained on";
    if (!hooks.force_resume) throw BadInput(msg);
    progress.message("warning: --force-resume: " + msg);
  }

  // ---- Phase 2: the run's files (rank 0's alone; every rank has passed Phase 1 when it starts).
  if (world > 1) comm.barrier("the end of the start-up checks");
  const int64_t save_delay_ms = save_delay_ms_from_env();
  const std::string config_json = to_json(cfg).dump(2) + "\n";
  if (writer) {
    io::prepare_output_dir(cfg.output_dir, "output_dir");
    for (const auto& name : remove_interrupted_saves(cfg.output_dir))
      progress.message("removed " + name + " (a save that was interrupted)");
    if (!from)
      for (const auto& old : list_checkpoints(cfg.output_dir)) {
        fs::remove_all(old.path);
        progress.message("removed " + old.path + " (--overwrite-output-dir: this run starts fresh)");
      }
    io::atomic_write_file((fs::path(cfg.output_dir) / "config_resolved.json").string(), config_json);
  }

  // Provenance: manifest.json is written now (a run that dies still says what it was made from)
  // and completed at the end; every adapter written carries the run's identity hash.
  nlohmann::json manifest = make_run_manifest(make_run_inputs(cfg, identity, omp_get_max_threads()));
  manifest["distributed"] = {{"world_size", world},
                             {"backend", comm.backend_name()},
                             {"deterministic_reduction", hooks.deterministic_reduction},
                             {"micro_batches_per_step", global_cfg.gradient_accumulation_steps}};
  // What computed (not part of the run's identity: a resume may change device or precision).
  manifest["compute"] = {{"backend", model.backend().describe()},
                         {"precision", backend::precision_name(model.backend().precision())}};
  // On a device, each micro-batch in passes of fewer rows (max_device_memory): the fp32 order
  // of the gradient sums, so a run compared bit for bit with another must have the same.
  if (!model.backend().device().is_cpu())
    manifest["compute"]["device_passes"] = hooks.device_passes;
  const std::string started = utc_timestamp_now();
  manifest["run"] = {{"started", started}, {"status", "running"}};
  if (writer) {
    manifest["config_resolved"] = config_digest(cfg.output_dir);
    write_run_manifest(cfg.output_dir, manifest);
  }
  std::map<std::string, std::string> adapter_metadata = hooks.adapter_metadata;
  adapter_metadata[kAdapterManifestKey] = manifest["inputs_sha256"].get<std::string>();

  model.set_lora(&lora);
  struct Unset {
    model::LlamaModel& m;
    ~Unset() { m.set_lora(nullptr); }
  } unset{model};
  // The adapter, its gradients and AdamW's moments where the model computes: on a device, copies
  // there that every step updates in place (the host copies are refreshed before each save).
  TrainState state(model.backend(), lora, adamw);
  state.to_device();

  // A resume in the checkpoint's own run directory continues its log from the checkpoint; one
  // into another output_dir (--resume PATH elsewhere) starts a new log there.
  std::error_code same_ec;
  const bool same_dir = from && fs::equivalent(fs::path(from->path).parent_path(), cfg.output_dir, same_ec);
  const std::string metrics_path = (fs::path(cfg.output_dir) / "metrics.jsonl").string();
  std::optional<MetricsLog> metrics;  // rank 0's
  if (writer) {
    if (same_dir)
      metrics.emplace(metrics_path, resumed.metrics_bytes);
    else
      metrics.emplace(metrics_path);
    if (cfg.report_to_tensorboard) metrics->add_sink(std::make_shared<TensorBoardSink>(logging_dir_of(cfg)));
    for (const auto& sink : hooks.metrics_sinks) metrics->add_sink(sink);
    metrics->started(from ? resumed.step : 0, plan.total_steps);
  }

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
  if (from)
    progress.message("resuming from " + from->path + " (step " + std::to_string(resumed.step) + " of " +
                     std::to_string(plan.total_steps) + ")");

  // Validation in batches of a training pass's rows: with max_device_memory's passes a forward
  // of micro_batch_size rows could hold more than a pass plans; one of a pass's rows holds less
  // (no gradients, no kept inputs). The same mean loss, summed in other batches.
  const int64_t passes = std::max<int64_t>(1, hooks.device_passes);
  const int64_t val_rows = (cfg.micro_batch_size + passes - 1) / passes;
  auto evaluate = [&](int64_t step) {
    if (data.val.empty() && !hooks.accuracy) return;
    EvalPoint e;
    if (!data.val.empty()) e = validation_loss(model, data.val, val_rows, data.pad_id, comm);
    e.step = step;
    if (hooks.accuracy) e.accuracy = hooks.accuracy();
    nlohmann::json j{{"step", step}, {"loss", e.loss}, {"tokens", e.tokens}};
    if (e.accuracy) j["accuracy"] = *e.accuracy;
    if (metrics) metrics->write({{"eval", j}});
    char buf[160];
    std::snprintf(buf, sizeof buf, "eval @ step %lld: loss %.4f", static_cast<long long>(step), e.loss);
    std::string line = buf;
    if (e.accuracy) {
      std::snprintf(buf, sizeof buf, ", accuracy %.4f", *e.accuracy);
      line += buf;
    }
    progress.message(line);
    sum.evals.push_back(e);
  };

  // Writes checkpoint-<done> (train/checkpoint_dir.h) and prunes old ones once it is in place.
  int64_t last_saved = from ? resumed.step : -1;  // that state is on disk already
  auto save_checkpoint = [&](int64_t done) {
    if (done == last_saved) return;
    last_saved = done;
    if (!writer) return;
    state.to_host();  // the adapter and AdamW's moments as the device has them now
    TrainerState st;
    st.step = done;
    st.total_steps = plan.total_steps;
    st.warmup_steps = plan.warmup_steps;
    st.tokens = sum.tokens;
    st.input_tokens = sum.input_tokens;
    st.losses = sum.losses;
    st.evals = sum.evals;
    st.cursor = cursor.state();
    st.num_threads = omp_get_max_threads();
    st.world_size = world;
    st.metrics_bytes = metrics->bytes();
    st.elapsed_s = resumed.elapsed_s + seconds_since(t0);
    st.skipped_steps = sum.skipped_steps;
    const io::PeftAdapter adapter = model::lora_to_peft(lora, cfg.base_model);
    auto json_part = [](const std::string& file, std::string text) {
      return [file, text = std::move(text)](const std::string& dir) { io::atomic_write_file(dir + "/" + file, text); };
    };
    const std::vector<CheckpointPart> parts{
        {"adapter_config.json, adapter_model.safetensors",
         [&](const std::string& dir) { io::write_peft_adapter(dir, adapter, adapter_metadata); }},
        {"optimizer.safetensors", [&](const std::string& dir) { write_optimizer_state(dir + "/optimizer.safetensors", adamw); }},
        {"trainer_state.json", json_part("trainer_state.json", to_json(st).dump(2) + "\n")},
        {"config_resolved.json", json_part("config_resolved.json", config_json)},
        {"identity.json", json_part("identity.json", to_json(identity).dump(2) + "\n")},
    };
    sum.checkpoint_dir = write_checkpoint_dir(cfg.output_dir, done, parts, save_delay_ms);
    prune_checkpoints(cfg.output_dir, cfg.save_total_limit);
    progress.message("saved " + sum.checkpoint_dir);
    metrics->checkpoint_saved(done);
  };

  if (cfg.eval_steps > 0 && !from) evaluate(0);

  const auto train_start = Clock::now();
  const int64_t input_tokens_before = sum.input_tokens;  // tokens_per_s counts this invocation's
  int64_t step = resumed.step;
  sum.stop_reason = "completed";
  dist::StepGradientSum step_grads(comm, grads, hooks.deterministic_reduction);
  // On a device the step's sum stays there, and so does the ranks' exchange of it, unless it is
  // the ordered one (which keeps each micro-batch apart: formed on the host).
  const bool sum_on_device = state.on_device() && (world == 1 || !hooks.deterministic_reduction);
  double device_exchange_s = 0;
  const int64_t first_micro = comm.rank() * cfg.gradient_accumulation_steps;  // this rank's share
  for (; step < plan.total_steps; ++step) {
    // Every rank stops at the same step: a signal or max_runtime seen by one is seen by all.
    enum : int64_t { kGoOn = 0, kSignal = 1, kMaxRuntime = 2 };
    int64_t stop = g_stop_signal != 0 ? kSignal : kGoOn;
    if (cfg.max_runtime_s > 0 && seconds_since(t0) > static_cast<double>(cfg.max_runtime_s)) stop = kMaxRuntime;
    if (world > 1) stop = comm.allreduce_max(stop, "the stop flags before step " + std::to_string(step + 1));
    if (stop != kGoOn) {
      sum.stop_reason = stop == kSignal ? "signal" : "max_runtime";
      break;
    }
    // Every rank walks the whole global batch (the loss is normalised by all its targets) and
    // builds only its own micro-batches.
    std::vector<model::TrainBatch> micro;
    int64_t step_targets = 0;
    for (int64_t a = 0; a < global_cfg.gradient_accumulation_steps; ++a) {
      model::TrainBatch b = make_batch(data.train, cursor.next(), cfg.train_on_inputs, data.pad_id,
                                       cfg.sample_packing ? cfg.sequence_len : 0);
      step_targets += count_targets(b);
      for (uint8_t m : b.mask) sum.input_tokens += m;
      if (a >= first_micro && a < first_micro + cfg.gradient_accumulation_steps) micro.push_back(std::move(b));
    }
    model::TrainOptions opt;
    opt.loss_scale = step_targets > 0 ? 1.0 / static_cast<double>(step_targets) : 0.0;
    opt.gradient_checkpointing = cfg.gradient_checkpointing;
    opt.device_passes = hooks.device_passes;
    if (!hooks.cpu_pass_policies) {
      opt.row_shards = 1;
      opt.last_layer_rows_only = false;
    }
    opt.dropout_seed = cfg.lora_dropout > 0 ? mix_seed(static_cast<uint64_t>(cfg.seed), static_cast<uint64_t>(step + 1)) : 0;
    // Each micro-batch from zeroed gradients, summed in order: on a device, there (TrainState's
    // begin_pass/end_pass, then its all-reduce with several ranks); otherwise on the host, where
    // the ranks exchange the sum (dist/gradient_sum.h). Both add the same fp32 values in the
    // same order.
    double loss_sum = 0.0;
    if (sum_on_device) {
      for (size_t k = 0; k < micro.size(); ++k) {
        opt.device_grads = state.begin_pass(k == 0);
        loss_sum += model::forward_backward(model, lora, micro[k], opt).loss_sum;
        state.end_pass(k == 0);
      }
      if (world > 1) {
        const auto t = Clock::now();
        loss_sum = state.allreduce_gradients(comm, loss_sum, "the gradients of step " + std::to_string(step + 1));
        device_exchange_s += seconds_since(t);
      }
    } else {
      step_grads.begin_step();
      for (const auto& b : micro) {
        lora.zero_grad();
        step_grads.add_micro_batch(model::forward_backward(model, lora, b, opt).loss_sum);
      }
      loss_sum = step_grads.finish(step + 1);
      state.load_gradients();
    }
    // torch.nn.utils.clip_grad_norm_ (train/grad_clip.h), on the state's backend.
    const double grad_norm = state.grad_norm();
    if (cfg.max_grad_norm > 0) {
      const float coef = clip_coefficient(grad_norm, cfg.max_grad_norm);
      if (clip_changes_gradients(coef)) state.scale_gradients(coef);
    }
    const double lr = lr_at(sched, step);
    const double loss = step_targets > 0 ? loss_sum / static_cast<double>(step_targets) : 0.0;
    // A non-finite loss or gradient would turn every weight into NaN: the step makes no update.
    // Up to skip_nonfinite_steps such steps are skipped; one more and the run has diverged.
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      ++sum.skipped_steps;
      const std::string what = "step " + std::to_string(step + 1) + ": loss " + number_text(loss) +
                               ", gradient norm " + number_text(grad_norm);
      if (sum.skipped_steps > cfg.skip_nonfinite_steps) {
        sum.diverged = what + (cfg.skip_nonfinite_steps > 0 ? " (" + std::to_string(sum.skipped_steps) +
                                                                  " non-finite steps, skip_nonfinite_steps " +
                                                                  std::to_string(cfg.skip_nonfinite_steps) + ")"
                                                            : "");
        sum.stop_reason = "diverged";
        break;
      }
      progress.message("warning: " + what + ": step skipped, no update (" + std::to_string(sum.skipped_steps) +
                       " of skip_nonfinite_steps " + std::to_string(cfg.skip_nonfinite_steps) + ")");
    } else {
      state.adamw_step(lr);
      // An update can overflow even from finite gradients (a learning rate of 1e30): it cannot be
      // undone, so the run stops before anything holding it is saved.
      if (!state.params_finite()) {
        sum.diverged = "step " + std::to_string(step + 1) + ": the update made LoRA weights NaN or Inf (learning rate " +
                       number_text(lr) + ")";
        sum.stop_reason = "diverged";
        break;
      }
    }

    sum.losses.push_back(loss);
    sum.tokens += step_targets;
    sum.final_loss = loss;
    const int64_t done = step + 1;
    const double train_s = seconds_since(train_start);
    ProgressState ps{done, plan.total_steps, loss, lr,
                     train_s > 0 ? static_cast<double>(sum.input_tokens - input_tokens_before) / train_s : 0.0, seconds_since(t0), rss_bytes()};
    if (metrics && cfg.logging_steps > 0 && (done % cfg.logging_steps == 0 || done == plan.total_steps)) {
      metrics->write({{"step", done},
                     {"epoch", static_cast<double>(cursor.consumed()) / static_cast<double>(plan.batches_per_epoch)},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", grad_norm},
                     {"tokens_per_s", ps.tokens_per_s},
                     {"elapsed_s", ps.elapsed_s},
                     {"rss_bytes", ps.rss_bytes}});
      progress.update(ps);
    }
    // Evaluate before saving, so the checkpoint holds this step's evaluation and a resume from it
    // neither repeats nor loses it.
    if (cfg.eval_steps > 0 && done % cfg.eval_steps == 0 && done < plan.total_steps) evaluate(done);
    if (cfg.save_steps > 0 && done % cfg.save_steps == 0 && done < plan.total_steps) save_checkpoint(done);
  }
  sum.steps = step;
  progress.finish();
  if (world > 1) {
    // What data parallelism cost: the exchange, waiting for the slowest rank included.
    const double train_s = seconds_since(train_start);
    const double exchange_s = sum_on_device ? device_exchange_s : step_grads.exchange_seconds();
    const int64_t bytes = sum_on_device ? state.exchange_bytes() : static_cast<int64_t>(step_grads.buffer_floats() * sizeof(float));
    const char* form = hooks.deterministic_reduction ? "ordered"
                       : !sum_on_device              ? "all-reduce"
                       : comm.reads_device_memory()  ? "all-reduce of device memory"
                                                     : "all-reduce, staged through the host";
    char buf[240];
    std::snprintf(buf, sizeof buf, "gradient exchange (%s, %s): %.3f s of %.3f s training (%.1f%%), %lld bytes per step",
                  comm.backend_name().c_str(), form, exchange_s, train_s, train_s > 0 ? 100.0 * exchange_s / train_s : 0.0,
                  static_cast<long long>(bytes));
    progress.message(buf);
    manifest["distributed"]["exchange_s"] = exchange_s;
  }
  if (sum.stop_reason == "diverged") {
    // Every rank holds the same summed gradients, so all of them diverge at the same step.
    if (!writer) return sum;
    return finish_diverged(std::move(sum), manifest, started, *metrics, cfg.output_dir, seconds_since(t0));
  }

  // The final evaluation: what the user reads. Skipped on a stop (signal or max_runtime): the user
  // or the time limit asked for the run to end now, and an evaluation can take minutes.
  // eval_steps 0 means never (train_config warns when a validation set is then unused).
  if (cfg.eval_steps > 0 && sum.stop_reason == "completed" &&
      (sum.evals.empty() || sum.evals.back().step != step))
    evaluate(step);
  // The last checkpoint (end, signal or max_runtime); skipped when this step is saved already
  // (a save_steps multiple, or the checkpoint this run resumed from without taking a step).
  save_checkpoint(step);
  sum.adapter_dir = (fs::path(cfg.output_dir) / "adapter").string();
  if (!writer) {
    sum.elapsed_s = seconds_since(t0);
    return sum;
  }
  state.to_host();
  io::write_peft_adapter(sum.adapter_dir, model::lora_to_peft(lora, cfg.base_model), adapter_metadata);
  sum.elapsed_s = seconds_since(t0);
  manifest["run"] = run_record(sum, started);
  manifest["run"]["final_loss"] = sum.final_loss;
  if (!sum.evals.empty()) {
    const EvalPoint& e = sum.evals.back();
    manifest["run"]["final_eval"] = {{"step", e.step}, {"loss", e.loss}};
    if (e.accuracy) manifest["run"]["final_eval"]["accuracy"] = *e.accuracy;
  }
  manifest["outputs"] = nlohmann::json::array();
  for (const char* name : {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}) {
    io::FileDigest d = io::digest_file((fs::path(cfg.output_dir) / name).string());
    d.path = name;
    manifest["outputs"].push_back(io::to_json(d));
  }
  write_run_manifest(cfg.output_dir, manifest);
  if (sum.stop_reason == "signal")
    progress.message("stopped by signal after step " + std::to_string(step) + "; adapter saved to " + sum.adapter_dir);
  else if (sum.stop_reason == "max_runtime")
    progress.message("stopped at max_runtime after step " + std::to_string(step) + "; adapter saved to " + sum.adapter_dir);
  nlohmann::json summary = summary_record(sum);
  summary["final_loss"] = sum.final_loss;
  metrics->write({{"summary", summary}});
  return sum;
}

}  // namespace medtune::train
