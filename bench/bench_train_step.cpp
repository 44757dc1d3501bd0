// LoRA training-step speed on a real model, on the shape the PyTorch + PEFT peer runs
// (bench/compare_train.py): B x T random token ids, every next token a target (labels = input_ids),
// LoRA on q,k,v,o,gate,up,down, one forward + backward + AdamW step per iteration.
// Prints one JSON object with the median step time over the timed steps (after one warm-up) and
// the median of each phase (forward, loss head, backward, optimizer), in wall-clock seconds and
// in process CPU seconds (all threads: the measure of work that a loaded machine disturbs least;
// with OpenMP's spinning waits it counts idle threads too, so compare it at --threads 1).
//
//   bench_train_step MODEL [--batch 4] [--seq 256] [--rank 16] [--steps 5] [--threads N]
//                    [--checkpointing 0|1] [--answer-tokens K] [--row-shards S]
//                    [--device cpu|gpu|gpu:N] [--targets all|qkvo] [--base-quant none|nf4]
//                    [--peak-after K] [--precision fp32|bf16|auto]
//                    [--bf16-weight-copy auto|true|false]
// --bf16-weight-copy: the trainer's key bf16_weight_copy (train/train_config.h); at bf16 on the
// CPU the base linears' bf16 copy is kept as medtune train keeps it (bf16_weight_copy_mib).
// On a device: the gradients and the AdamW step stay there (train/train_state.h, as the trainer
// runs a step on one rank), and device_peak_mib is the backend's peak_bytes() at the
// end; with --peak-after K also device_peak_after_mib, its value after step K (flat memory: equal).
// device_plan_mib is the trainer's device plan for this shape (train/memory_plan.h, the base
// weights as uploaded), told to the backend as `medtune train` tells it (Backend::plan_memory);
// its parts go to stderr. --plan-only 1: that plan from the checkpoint's header alone (the base
// weights as planned_weight_bytes gives them), nothing loaded or run: a 7B shape's plan on a
// machine that could not run its step.
// --max-device-memory SIZE (8GiB, ...): on a device, the step in passes of fewer rows when the
// plan at B rows is larger (train/memory_plan.h: plan_device_passes; device_passes in the JSON).
// --answer-tokens K > 0: only the last K positions of each row are targets (completion-only loss,
// as in MCQ fine-tuning where the prompt is masked); 0 (default): every next token.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench_main.h"
#include "bench_timing.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/train_step.h"
#include "model/weights.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/train_config.h"
#include "train/train_state.h"

using medtune::bench::median;
using medtune::bench::seconds_since;

namespace {

int run(int argc, char** argv) {
  using namespace medtune;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: bench_train_step MODEL [--batch B] [--seq T] [--rank R] [--steps N] [--threads N] "
                 "[--checkpointing 0|1] [--answer-tokens K] [--row-shards S] [--device D] [--targets all|qkvo] "
                 "[--base-quant none|nf4] [--peak-after K] [--precision P] [--plan-only 0|1] "
                 "[--bf16-weight-copy auto|true|false] [--max-device-memory SIZE]\n";
    return 2;
  }
  const std::string path = argv[1];
  int64_t B = 4, T = 256, rank = 16, steps = 5, ckpt = 0, answer = 0, shards = 0, peak_after = 0,
          plan_only = 0;
  int threads = 0;
  std::string device = "cpu", targets = "all", base_quant = "none", precision = "auto";
  std::string bf16_copy = "auto";
  double max_device_memory = 0;  // bytes; 0: one pass (the device's free memory is not asked)
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") { device = argv[i + 1]; continue; }
    if (k == "--bf16-weight-copy") { bf16_copy = argv[i + 1]; continue; }
    if (k == "--precision") { precision = argv[i + 1]; continue; }
    if (k == "--targets") { targets = argv[i + 1]; continue; }
    if (k == "--base-quant") { base_quant = argv[i + 1]; continue; }
    if (k == "--max-device-memory") {
      const std::optional<double> bytes = train::parse_memory_size(argv[i + 1]);
      if (!bytes) {
        std::cerr << "bench_train_step: --max-device-memory must be " << train::kMemorySizeMust
                  << "\n";
        return 2;
      }
      max_device_memory = *bytes;
      continue;
    }
    const long v = std::atol(argv[i + 1]);
    if (k == "--batch") B = v;
    else if (k == "--seq") T = v;
    else if (k == "--rank") rank = v;
    else if (k == "--steps") steps = v;
    else if (k == "--threads") threads = static_cast<int>(v);
    else if (k == "--checkpointing") ckpt = v;
    else if (k == "--answer-tokens") answer = v;
    else if (k == "--row-shards") shards = v;
    else if (k == "--peak-after") peak_after = v;
    else if (k == "--plan-only") plan_only = v;
  }
  if (steps < 1 && plan_only == 0) {
    std::cerr << "bench_train_step: --steps must be at least 1 (the timed steps after the warm-up)\n";
    return 2;
  }
  if (threads > 0) omp_set_num_threads(threads);

  // The trainer's device plan for this shape (weights: the base's bytes on the device).
  train::TrainConfig plan_cfg;
  plan_cfg.micro_batch_size = B;
  plan_cfg.sequence_len = T;
  plan_cfg.gradient_checkpointing = ckpt != 0;
  plan_cfg.device = device;
  plan_cfg.precision = precision;
  plan_cfg.num_threads = threads;
  plan_cfg.bf16_weight_copy = bf16_copy;
  plan_cfg.max_device_memory = max_device_memory;
  const auto plan_for = [&](const ModelConfig& c, const model::LoraWeights& lora, int64_t weights,
                            bool qk_rows_permuted) {
    const train::MemoryPlan plan =
        train::plan_device_passes(plan_cfg, c, lora, weights, 0, qk_rows_permuted,
                                  max_device_memory);
    if (plan.on_device) std::cerr << train::format_memory_plan(plan_cfg, plan);
    return plan;
  };
  const auto mib = [](double bytes) { return bytes / (1024.0 * 1024.0); };
  model::LoraConfig lc;
  lc.r = rank;
  lc.alpha = 2.0 * static_cast<double>(rank);
  if (targets == "qkvo") lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o};
  else lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                     model::Proj::gate, model::Proj::up, model::Proj::down};
  const model::WeightQuant quant = model::parse_weight_quant(base_quant, "--base-quant");
  io::Checkpoint checkpoint = io::open_checkpoint(path);
  if (plan_only != 0) {
    const model::WeightBytes wb = model::planned_weight_bytes(checkpoint, quant);
    const train::MemoryPlan plan = plan_for(checkpoint.config, model::lora_shapes(checkpoint.config, lc),
                                            wb.mapped + wb.quantized, checkpoint.qk_rows_permuted);
    std::cout << nlohmann::json{{"model", path}, {"batch", B}, {"seq", T}, {"rank", rank},
                                {"targets", targets}, {"base_quant", base_quant},
                                {"checkpointing", ckpt != 0}, {"device_passes", plan.device_passes},
                                {"device_plan_mib", mib(plan.device_total())},
                                {"device_weights_mib", mib(plan.device_weights)},
                                {"device_adapter_mib", mib(plan.device_adapter())},
                                {"device_acts_mib", mib(plan.device_acts)}, {"device_kv_mib", mib(plan.kv)},
                                {"device_workspace_mib", mib(plan.device_workspace)}}
                     .dump()
              << "\n";
    return 0;
  }

  const backend::Device dev = backend::parse_device(device, "--device");
  backend::Backend& be = backend::for_device(dev, backend::parse_precision(precision, dev, "--precision"));
  model::LlamaModel m(std::move(checkpoint), quant, be);
  model::LoraWeights lora = model::init_lora(m.config(), lc, 42);
  m.set_lora(&lora);

  std::vector<train::ParamRef> params;
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      if (ll.enabled()) {
        params.push_back({"A", ll.A.data(), ll.dA.data(), static_cast<int64_t>(ll.A.size())});
        params.push_back({"B", ll.B.data(), ll.dB.data(), static_cast<int64_t>(ll.B.size())});
      }
  train::AdamW adamw(train::AdamWConfig{}, params);
  // The base weights counted as uploaded.
  train::MemoryPlan plan =
      plan_for(m.config(), lora, be.resident_bytes(), m.weights().qk_rows_permuted);
  if (plan.on_device) be.plan_memory(static_cast<int64_t>(plan.device_total()));
  // As medtune train keeps them (bf16 copies of the base linears at bf16 on the CPU).
  train::settle_bf16_copy(
      plan_cfg, plan,
      2.0 * static_cast<double>(model::bf16_copy_elements(m.checkpoint(), quant)),
      train::available_memory_bytes());
  const int64_t bf16_copy_bytes = plan.bf16_copy > 0 ? m.keep_bf16_weight_copies() : 0;
  train::TrainState state(be, lora, adamw);  // the adapter and AdamW's moments where the model computes
  state.to_device();

  // (B, T) random ids; targets[t] = ids[t + 1] (the last position of each row has none).
  model::TrainBatch batch;
  batch.B = B;
  batch.T = T;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.config().vocab_size) - 1);
  for (int64_t i = 0; i < B * T; ++i) batch.ids.push_back(tok(rng));
  batch.targets.assign(static_cast<size_t>(B * T), -100);
  // Positions [first, T - 1) of each row predict the next token: all of them, or the last K.
  const int64_t first = answer > 0 ? std::max<int64_t>(0, T - 1 - answer) : 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = first; t + 1 < T; ++t) batch.targets[static_cast<size_t>(b * T + t)] = batch.ids[static_cast<size_t>(b * T + t + 1)];

  model::TrainOptions opt;
  opt.loss_scale = 1.0 / static_cast<double>(B * (T - 1 - first));
  opt.gradient_checkpointing = ckpt != 0;
  opt.row_shards = shards;  // 0: automatic (model/row_shards.h)
  opt.device_passes = plan.device_passes;  // 1 unless --max-device-memory asks for fewer bytes
  std::vector<double> times, cpu_times;
  // Per phase, one entry per timed step: forward, loss head, backward, optimizer; wall and CPU.
  std::vector<double> t_fwd, t_loss, t_bwd, t_opt, c_fwd, c_loss, c_bwd, c_opt;
  double loss = 0;
  int64_t peak_after_bytes = 0;
  for (int64_t s = 0; s <= steps; ++s) {  // step 0: warm-up, not timed
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    model::StepTimes phases;
    opt.times = &phases;
    // As the trainer runs one micro-batch per step on one rank: on a device the gradients stay
    // there (TrainState::begin_pass), on the CPU they are the host dA, dB.
    if (state.on_device()) {
      opt.device_grads = state.begin_pass(true);
    } else {
      lora.zero_grad();
    }
    loss = model::forward_backward(m, lora, batch, opt).loss_sum * opt.loss_scale;
    const auto t1 = std::chrono::steady_clock::now();
    const std::clock_t c1 = std::clock();
    if (state.on_device()) state.end_pass(true);
    state.adamw_step(1e-4);
    if (s == peak_after) peak_after_bytes = be.peak_bytes();
    if (s > 0) {
      times.push_back(seconds_since(t0));
      cpu_times.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      t_fwd.push_back(phases.forward.wall);
      t_loss.push_back(phases.loss_head.wall);
      t_bwd.push_back(phases.backward.wall);
      t_opt.push_back(seconds_since(t1));
      c_fwd.push_back(phases.forward.cpu);
      c_loss.push_back(phases.loss_head.cpu);
      c_bwd.push_back(phases.backward.cpu);
      c_opt.push_back(static_cast<double>(std::clock() - c1) / CLOCKS_PER_SEC);
    }
  }
  const double med = median(times);
  // Peak resident set: VmHWM of /proc/self/status, which starts afresh at exec. getrusage's
  // ru_maxrss does not: Linux carries the forking parent's peak across execve, so a bench started
  // by a Python process that holds a PyTorch model would report the parent's size.
  double peak_rss_kib = 0;
  {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0) peak_rss_kib = std::atof(line.c_str() + 6);
  }
  nlohmann::json j = {{"model", path},
                      {"device", be.describe()},
                      {"targets", targets},
                      {"base_quant", base_quant},
                      {"device_peak_mib", static_cast<double>(be.peak_bytes()) / (1024.0 * 1024.0)},
                      {"device_peak_after_mib", static_cast<double>(peak_after_bytes) / (1024.0 * 1024.0)},
                      {"device_plan_mib", plan.on_device ? mib(plan.device_total()) : 0.0},
                      {"device_passes", plan.device_passes},
                      {"peak_after_step", peak_after},
                      {"batch", B},
                      {"seq", T},
                      {"rank", rank},
                      {"threads", omp_get_max_threads()},
                      {"checkpointing", ckpt != 0},
                      {"steps_timed", steps},
                      {"median_step_s", med},
                      {"median_step_cpu_s", median(cpu_times)},
                      {"median_phase_s", {{"forward", median(t_fwd)},
                                          {"loss_head", median(t_loss)},
                                          {"backward", median(t_bwd)},
                                          {"optimizer", median(t_opt)}}},
                      {"median_phase_cpu_s", {{"forward", median(c_fwd)},
                                              {"loss_head", median(c_loss)},
                                              {"backward", median(c_bwd)},
                                              {"optimizer", median(c_opt)}}},
                      {"tokens_per_s", static_cast<double>(B * T) / med},
                      {"last_loss", loss},
                      {"peak_rss_mib", peak_rss_kib / 1024.0},
                      {"bf16_weight_copy_mib", mib(static_cast<double>(bf16_copy_bytes))}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return medtune::bench::main_reporting_errors("bench_train_step", argc, argv, run);
}
