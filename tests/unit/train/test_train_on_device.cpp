// The training loop with the model on the simulated device (tests/unit/model/simulated_device.h),
// where the adapter, its summed gradients and AdamW's moments live in the device's memory
// (train/train_state.h) and each step's gradient norm, clipping, AdamW update and finiteness
// check run there as backend ops, reading and writing only that memory. The run must equal the
// CPU's bit for bit (the simulated device computes with the CPU's arithmetic): the adapter and
// optimizer files, losses, gradient norms and evaluations; and a run stopped and resumed on the
// device must end where the uninterrupted one does.
#include <unistd.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <fstream>
#include <random>
#include <sstream>

#include "backend/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "support/files.h"
#include "support/thread_ranks.h"
#include "train/grad_clip.h"
#include "train/memory_plan.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "unit/model/simulated_device.h"

namespace medtune::train {
namespace {

namespace fs = std::filesystem;

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

// One for the process: layer scratch is kept per thread between calls (model/layer.cpp) and
// released on the backend that allocated it, which must outlive it, as a GPU backend does.
testing::SimulatedDevice& device() {
  static testing::SimulatedDevice d;
  return d;
}

std::vector<Example> examples(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Example> out;
  for (int64_t i = 0; i < n; ++i) {
    Example ex;
    const int64_t len = 3 + static_cast<int64_t>(rng() % 8);
    for (int64_t t = 0; t < len; ++t) ex.context.push_back(static_cast<int32_t>(3 + rng() % 90));
    ex.answer = {static_cast<int32_t>(ex.context.back() % 97 + 1), static_cast<int32_t>(rng() % 97 + 1)};
    out.push_back(std::move(ex));
  }
  return out;
}

TrainData data() {
  TrainData d;
  d.train = examples(10, 1);
  d.val = examples(3, 2);
  return d;
}

// Accumulation over micro-batches, dropout, weight decay, a warm-up and cosine schedule, and a
// max_grad_norm that the early steps' gradients exceed (so clipping scales them).
TrainConfig config(const std::string& out) {
  TrainConfig cfg;
  cfg.base_model = kFixture;
  cfg.lora_r = 4;
  cfg.lora_alpha = 8;
  cfg.lora_dropout = 0.1;
  cfg.lora_target_modules = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::down};
  cfg.micro_batch_size = 3;
  cfg.gradient_accumulation_steps = 2;
  cfg.max_steps = 6;
  cfg.learning_rate = 2e-2;
  cfg.lr_scheduler = ScheduleKind::kCosine;
  cfg.warmup_steps = 1;
  cfg.weight_decay = 0.01;
  cfg.max_grad_norm = 0.05;
  cfg.save_steps = 2;
  cfg.eval_steps = 3;
  cfg.output_dir = out;
  cfg.seed = 11;
  return cfg;
}

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("medtune_test_device_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

using testing::read_file;

// Each logged step's gradient norm (metrics.jsonl), in order.
std::vector<double> grad_norms(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("grad_norm")) out.push_back(j["grad_norm"].get<double>());
  }
  return out;
}

void expect_same_run(const TrainSummary& got, const std::string& got_dir, const TrainSummary& ref,
                     const std::string& ref_dir) {
  EXPECT_EQ(got.steps, ref.steps);
  EXPECT_EQ(got.losses, ref.losses);
  ASSERT_EQ(got.evals.size(), ref.evals.size());
  for (size_t i = 0; i < ref.evals.size(); ++i) {
    EXPECT_EQ(got.evals[i].step, ref.evals[i].step);
    EXPECT_EQ(got.evals[i].loss, ref.evals[i].loss) << "evaluation at step " << ref.evals[i].step;
  }
  EXPECT_EQ(grad_norms(got_dir), grad_norms(ref_dir));
  for (const char* file : {"adapter/adapter_model.safetensors", "checkpoint-6/adapter_model.safetensors",
                           "checkpoint-6/optimizer.safetensors", "checkpoint-4/optimizer.safetensors"})
    EXPECT_TRUE(read_file(got_dir + "/" + file) == read_file(ref_dir + "/" + file)) << file << " differs";
}

// An adapter with every value set (A, B, dA, dB) and its AdamW, whose parameters are A and B in
// trainer.cpp's order.
struct Adapter {
  model::LoraWeights lora;
  std::unique_ptr<AdamW> adamw;
  explicit Adapter(const ModelConfig& c) {
    model::LoraConfig lc;
    lc.r = 3;  // odd sizes: the device's matrices are padded to 64 floats
    lc.alpha = 6;
    lc.targets = {model::Proj::q, model::Proj::v, model::Proj::down};
    lora = model::init_lora(c, lc, 3);
    std::mt19937_64 rng(4);
    std::normal_distribution<float> n(0.0f, 0.1f);
    std::vector<ParamRef> params;
    for (auto& layer : lora.layers)
      for (auto& ll : layer) {
        if (!ll.enabled()) continue;
        for (auto* v : {&ll.B, &ll.dA, &ll.dB})
          for (float& x : *v) x = n(rng);
        params.push_back({"A", ll.A.data(), ll.dA.data(), static_cast<int64_t>(ll.A.size())});
        params.push_back({"B", ll.B.data(), ll.dB.data(), static_cast<int64_t>(ll.B.size())});
      }
    AdamWConfig cfg;
    cfg.lr = 1e-2;
    cfg.weight_decay = 0.1;
    adamw = std::make_unique<AdamW>(cfg, params);
  }
  std::vector<std::span<float>> grads() {
    std::vector<std::span<float>> g;
    for (auto& layer : lora.layers)
      for (auto& ll : layer)
        if (ll.enabled()) {
          g.emplace_back(ll.dA);
          g.emplace_back(ll.dB);
        }
    return g;
  }
  std::vector<float> values() const {  // A, B, m, v in order
    std::vector<float> out;
    for (const auto& layer : lora.layers)
      for (const auto& ll : layer) {
        out.insert(out.end(), ll.A.begin(), ll.A.end());
        out.insert(out.end(), ll.B.begin(), ll.B.end());
      }
    for (size_t i = 0; i < adamw->num_params(); ++i) {
      out.insert(out.end(), adamw->m(i).begin(), adamw->m(i).end());
      out.insert(out.end(), adamw->v(i).begin(), adamw->v(i).end());
    }
    return out;
  }
};

// Two optimizer steps with clipping through TrainState: on the CPU it works on the host objects
// themselves; on the device on its own copies, and the host values after to_host() are the
// CPU's bit for bit (norms included), as are the host-only functions' (global_grad_norm,
// clip_grad_norm, AdamW::step).
TEST(TrainState, StepsOnTheCpuAndOnADeviceEqualTheHostOptimizer) {
  const ModelConfig c = io::open_checkpoint(kFixture).config;
  Adapter host(c), cpu(c), dev(c);
  std::vector<double> host_norms, cpu_norms, dev_norms;
  for (int step = 0; step < 2; ++step) {
    host_norms.push_back(clip_grad_norm(host.grads(), 0.5));
    host.adamw->step(1e-2);
  }
  {
    TrainState state(backend::cpu(), cpu.lora, *cpu.adamw);
    EXPECT_FALSE(state.on_device());
    EXPECT_EQ(state.device_bytes(), 0);
    state.load_gradients();  // once: the second step reuses the clipped gradients, as on the host
    for (int step = 0; step < 2; ++step) {
      cpu_norms.push_back(state.grad_norm());
      const float coef = clip_coefficient(cpu_norms.back(), 0.5);
      ASSERT_TRUE(clip_changes_gradients(coef));
      state.scale_gradients(coef);
      state.adamw_step(1e-2);
      EXPECT_TRUE(state.params_finite());
    }
    EXPECT_EQ(cpu.lora.at(0, model::Proj::q).device_A, nullptr);
  }
  {
    const std::vector<float> before = dev.values();
    TrainState state(device(), dev.lora, *dev.adamw);
    EXPECT_TRUE(state.on_device());
    int64_t numel = 0;
    for (size_t i = 0; i < dev.adamw->num_params(); ++i) numel += dev.adamw->param(i).numel;
    EXPECT_GE(state.device_bytes(), 4 * 4 * numel);  // parameters, gradients, m, v
    EXPECT_LE(state.device_bytes(), 4 * 4 * (numel + 64 * static_cast<int64_t>(dev.adamw->num_params())));
    EXPECT_THROW(state.end_pass(false), Internal);  // the pass buffer comes with begin_pass(false)
    const model::LoraLinear& q0 = dev.lora.at(0, model::Proj::q);
    ASSERT_NE(q0.device_A, nullptr);
    EXPECT_NE(q0.device_A, q0.A.data());
    state.to_device();
    state.load_gradients();  // once: the second step reuses the clipped gradients, as on the host
    for (int step = 0; step < 2; ++step) {
      dev_norms.push_back(state.grad_norm());
      const float coef = clip_coefficient(dev_norms.back(), 0.5);
      ASSERT_TRUE(clip_changes_gradients(coef));
      state.scale_gradients(coef);
      state.adamw_step(1e-2);
      EXPECT_TRUE(state.params_finite());
    }
    EXPECT_EQ(dev.values(), before);  // the host copies lag until to_host()
    state.to_host();
  }
  EXPECT_EQ(dev.lora.at(0, model::Proj::q).device_A, nullptr);  // cleared with the state
  EXPECT_EQ(cpu_norms, host_norms);
  EXPECT_EQ(dev_norms, host_norms);
  EXPECT_EQ(cpu.values(), host.values());
  EXPECT_EQ(dev.values(), host.values());
  EXPECT_EQ(cpu.adamw->step_count(), 2);
  EXPECT_EQ(dev.adamw->step_count(), 2);
}

// A step of one micro-batch writes its gradients into the step's own array: the state holds four
// arrays of the adapter's size (train/memory_plan.h plans 4 x params). A fifth, the pass buffer,
// comes with the first later micro-batch.
TEST(TrainState, APassBufferOnlyForLaterMicroBatches) {
  const ModelConfig c = io::open_checkpoint(kFixture).config;
  Adapter dev(c);
  TrainState state(device(), dev.lora, *dev.adamw);
  state.to_device();
  const int64_t four = state.device_bytes();
  const auto* first = state.begin_pass(true);
  state.end_pass(true);
  EXPECT_EQ(state.device_bytes(), four);
  const auto* later = state.begin_pass(false);
  EXPECT_EQ(state.device_bytes(), four / 4 * 5);
  ASSERT_NE((*first)[0][0].dA, nullptr);  // q of layer 0 has an adapter here
  EXPECT_NE((*first)[0][0].dA, (*later)[0][0].dA);
  state.end_pass(false);
}

TEST(TrainOnDevice, EqualsTheCpuRunBitForBit) {
  const TrainData d = data();
  std::ostringstream log;
  const auto cpu_dir = fresh_dir("cpu");
  model::LlamaModel cpu_model(io::open_checkpoint(kFixture));
  TrainHooks one_pass;  // the CPU's row shards and last-layer row restriction off, as on a device
  one_pass.cpu_pass_policies = false;
  const auto ref = run_training(config(cpu_dir), cpu_model, d, one_pass, log);
  ASSERT_EQ(ref.steps, 6);
  // Clipping must have acted: every step's norm is above max_grad_norm, and the same run without
  // clipping has other losses.
  for (const double norm : grad_norms(cpu_dir)) EXPECT_GT(norm, config(cpu_dir).max_grad_norm);
  const auto unclipped_dir = fresh_dir("cpu_unclipped");
  TrainConfig unclipped = config(unclipped_dir);
  unclipped.max_grad_norm = 0;
  EXPECT_NE(run_training(unclipped, cpu_model, d, one_pass, log).losses, ref.losses);
  fs::remove_all(unclipped_dir);

  const auto dev_dir = fresh_dir("device");
  model::LlamaModel dev_model(io::open_checkpoint(kFixture), model::WeightQuant::kNone, device());
  const auto got = run_training(config(dev_dir), dev_model, d, {}, log);
  expect_same_run(got, dev_dir, ref, cpu_dir);
  // The state's arrays (parameters, gradients, moments) go back with the run: a second run
  // leaves the device holding as many blocks as the first left (the layers' per-thread scratch).
  const int64_t blocks_after_first = device().live_blocks();
  fs::remove_all(dev_dir);
  run_training(config(dev_dir), dev_model, d, {}, log);
  EXPECT_EQ(device().live_blocks(), blocks_after_first);
  fs::remove_all(cpu_dir);
  fs::remove_all(dev_dir);
}

// max_device_memory's passes in the training loop (TrainHooks::device_passes, as medtune train
// sets them from its plan): each micro-batch of 3 rows in 3 passes follows the one-pass run to
// fp32 rounding (the same gradients summed in another order; dropout masks kept), the manifest
// records the passes, and the device's peak over the whole run, validation included (in batches
// of a pass's rows), stays within the plan of 1-row passes (the simulated device has no
// workspace: the plan without it), below the one-pass run's. Validation in batches of 3 rows
// would take the peak past that plan (207,758 bytes against 169,420).
TEST(TrainOnDevice, PassesFollowTheOnePassRunWithinTheirPlan) {
  static testing::SimulatedDevice devices[2];  // one each: peak_bytes() is a device's whole life
  const TrainData d = data();
  std::ostringstream log;
  struct Run {
    TrainSummary summary;
    int64_t peak = 0;
    double plan = 0;
  };
  const auto run = [&](int k, int64_t passes, const std::string& dir) {
    model::LlamaModel m(io::open_checkpoint(kFixture), model::WeightQuant::kNone, devices[k]);
    TrainConfig cfg = config(dir);
    cfg.sequence_len = 12;  // the examples' longest (3 + 7 context + 2 answer tokens): the plan's T
    TrainConfig gpu = cfg;
    gpu.device = "gpu";
    gpu.precision = "fp32";  // the simulated device's arithmetic
    Run r;
    const MemoryPlan p =
        plan_memory(gpu, m.config(), model::lora_shapes(m.config(), lora_config(cfg)),
                    devices[k].peak_bytes() /* the weights, uploaded */, 0, false, passes);
    r.plan = p.device_total() - p.device_workspace;
    TrainHooks hooks;
    hooks.device_passes = passes;
    r.summary = run_training(cfg, m, d, hooks, log);
    r.peak = devices[k].peak_bytes();
    return r;
  };
  const auto one_dir = fresh_dir("one_pass"), three_dir = fresh_dir("three_passes");
  const Run one = run(0, 1, one_dir);
  const Run three = run(1, 3, three_dir);
  ASSERT_EQ(three.summary.steps, 6);
  ASSERT_EQ(three.summary.losses.size(), one.summary.losses.size());
  for (size_t i = 0; i < one.summary.losses.size(); ++i)
    EXPECT_NEAR(three.summary.losses[i], one.summary.losses[i],
                1e-5 * std::fabs(one.summary.losses[i]))
        << "step " << i + 1;
  ASSERT_EQ(three.summary.evals.size(), one.summary.evals.size());
  for (size_t i = 0; i < one.summary.evals.size(); ++i)
    EXPECT_NEAR(three.summary.evals[i].loss, one.summary.evals[i].loss,
                1e-5 * std::fabs(one.summary.evals[i].loss));
  const auto manifest = nlohmann::json::parse(read_file(three_dir + "/manifest.json"));
  EXPECT_EQ(manifest["compute"]["device_passes"], 3);
  EXPECT_LE(three.peak, three.plan);
  EXPECT_LE(one.peak, one.plan);
  EXPECT_LT(three.peak, one.peak);
  for (const auto& dir : {one_dir, three_dir}) fs::remove_all(dir);
}

// Stops after step 3's evaluation, then resumes from checkpoint-3 on the device: the state is
// copied back to the host for each save and up to the device on resume.
TEST(TrainOnDevice, StoppedAndResumedEqualsTheUninterruptedRun) {
  const TrainData d = data();
  std::ostringstream log;
  model::LlamaModel dev_model(io::open_checkpoint(kFixture), model::WeightQuant::kNone, device());
  const auto ref_dir = fresh_dir("uninterrupted");
  const auto ref = run_training(config(ref_dir), dev_model, d, {}, log);

  const auto dir = fresh_dir("sliced");
  TrainConfig cfg = config(dir);
  int calls = 0;
  TrainHooks stop_at_step3;
  stop_at_step3.accuracy = [&calls] {
    if (++calls == 2) request_stop();  // evaluations at steps 0 and 3
    return 0.5;
  };
  const auto first = run_training(cfg, dev_model, d, stop_at_step3, log);
  ASSERT_EQ(first.stop_reason, "signal");
  ASSERT_EQ(first.steps, 3);
  cfg.resume_from_checkpoint = "auto";
  const auto rest = run_training(cfg, dev_model, d, {}, log);
  EXPECT_EQ(rest.resumed_from, dir + "/checkpoint-3");
  EXPECT_EQ(rest.losses, ref.losses);
  for (const char* file : {"adapter/adapter_model.safetensors", "checkpoint-6/optimizer.safetensors"})
    EXPECT_TRUE(read_file(dir + "/" + file) == read_file(ref_dir + "/" + file)) << file << " differs";
  fs::remove_all(ref_dir);
  fs::remove_all(dir);
}

// Two ranks (threads, tests/support/thread_ranks.h), each with its model on a simulated device of
// its own, in the all-reduce mode: each sums its micro-batches on its device and the ranks
// all-reduce that sum, by an engine that reads device memory (as NCCL does) or staged through
// the host (as over MPI). Both must give the bits of the same ranks on the CPU, whose sums are
// formed and all-reduced on the host (dist/gradient_sum.h): each rank adds its micro-batches in
// the same order, and the engine adds the ranks' sums in rank order.
TEST(TrainOnDevice, RanksAllReduceTheirDeviceSumsAsTheHostDoes) {
  const TrainData d = data();
  struct RankRun {
    TrainSummary summary;
    std::string log;
  };
  // Two ranks of the same run: rank 0 (the writer) returned, once the ranks agree on every loss.
  const auto run_ranks = [&](const std::string& dir, bool on_device, bool engine_reads_device,
                             int* device_allreduces) {
    static testing::SimulatedDevice devices[2];  // outlive the rank threads' layer scratch
    testing::ThreadHub hub(2);
    std::vector<RankRun> runs(2);
    testing::run_thread_ranks(hub, engine_reads_device, [&](testing::ThreadRank& comm) {
      const auto r = static_cast<size_t>(comm.rank());
      model::LlamaModel m = on_device ? model::LlamaModel(io::open_checkpoint(kFixture), model::WeightQuant::kNone, devices[r])
                                      : model::LlamaModel(io::open_checkpoint(kFixture));
      TrainHooks hooks;
      hooks.comm = &comm;
      hooks.deterministic_reduction = false;
      hooks.cpu_pass_policies = false;
      std::ostringstream log;
      runs[r].summary = run_training(config(dir), m, d, hooks, log);
      runs[r].log = log.str();
    });
    if (device_allreduces != nullptr) *device_allreduces = hub.device_allreduces;
    EXPECT_EQ(runs[0].summary.losses, runs[1].summary.losses) << "the ranks disagree";
    return runs[0];
  };
  const auto cpu_dir = fresh_dir("ranks_cpu");
  const RankRun ref = run_ranks(cpu_dir, false, false, nullptr);
  ASSERT_EQ(ref.summary.steps, 6);
  EXPECT_NE(ref.log.find("(threads, all-reduce)"), std::string::npos) << ref.log;

  const auto staged_dir = fresh_dir("ranks_staged");
  const RankRun staged = run_ranks(staged_dir, true, false, nullptr);
  EXPECT_NE(staged.log.find("all-reduce, staged through the host"), std::string::npos) << staged.log;
  expect_same_run(staged.summary, staged_dir, ref.summary, cpu_dir);

  const auto direct_dir = fresh_dir("ranks_direct");
  int device_allreduces = 0;
  const RankRun direct = run_ranks(direct_dir, true, true, &device_allreduces);
  EXPECT_NE(direct.log.find("all-reduce of device memory"), std::string::npos) << direct.log;
  EXPECT_EQ(device_allreduces, 2 * 6) << "one per rank and step";
  expect_same_run(direct.summary, direct_dir, ref.summary, cpu_dir);
  for (const auto& dir : {cpu_dir, staged_dir, direct_dir}) fs::remove_all(dir);
}

}  // namespace
}  // namespace medtune::train
