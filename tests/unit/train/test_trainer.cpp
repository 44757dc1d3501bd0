// The training loop on the tiny llama_gqa fixture (vocab 100) with synthetic token ids: loss
// normalisation under gradient accumulation, gradient checkpointing, a decreasing loss, clean stops.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/train_step.h"
#include "train/batcher.h"
#include "train/trainer.h"

namespace medtune::train {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

model::LlamaModel open_fixture() { return model::LlamaModel(io::open_checkpoint(kFixture)); }

// Synthetic examples: a random context and a short answer that is a fixed function of the
// context's last token, so there is something to learn.
std::vector<Example> synthetic_examples(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Example> out;
  for (int64_t i = 0; i < n; ++i) {
    Example ex;
    const int64_t len = 4 + static_cast<int64_t>(rng() % 9);
    for (int64_t t = 0; t < len; ++t) ex.context.push_back(static_cast<int32_t>(3 + rng() % 90));
    const int32_t last = ex.context.back();
    const int64_t nans = 1 + static_cast<int64_t>(rng() % 3);
    for (int64_t t = 0; t < nans; ++t) ex.answer.push_back(static_cast<int32_t>((last * 7 + t) % 97 + 1));
    ex.source = "synthetic:" + std::to_string(i + 1);
    out.push_back(std::move(ex));
  }
  return out;
}

// LoRA with B != 0, so dA is not trivially zero.
model::LoraWeights random_lora(const model::LlamaModel& m) {
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o, model::Proj::gate,
                model::Proj::up, model::Proj::down};
  auto lora = model::init_lora(m.config(), lc, 1);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      for (auto& b : ll.B) b = u(rng);
  return lora;
}

std::vector<float> flat_grads(const model::LoraWeights& lora) {
  std::vector<float> g;
  for (const auto& layer : lora.layers)
    for (const auto& ll : layer) {
      g.insert(g.end(), ll.dA.begin(), ll.dA.end());
      g.insert(g.end(), ll.dB.begin(), ll.dB.end());
    }
  return g;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den > 0 ? num / den : num;
}

TEST(Trainer, AccumulatedMicroBatchesEqualOneBatch) {
  auto model = open_fixture();
  auto lora = random_lora(model);
  model.set_lora(&lora);
  auto ex = synthetic_examples(3, 11);
  ex[0].answer = {5, 6, 7};  // 3 + 1 targets in micro-batch 1, 2 in micro-batch 2
  ex[1].answer = {8};
  ex[2].answer = {9, 10};
  // Micro-batch 1: rows 0 and 1; micro-batch 2: row 2, with a different target count.
  const auto b1 = make_batch(ex, {0, 1}, false, 0);
  const auto b2 = make_batch(ex, {2}, false, 0);
  const auto both = make_batch(ex, {0, 1, 2}, false, 0);
  const int64_t n1 = count_targets(b1), n2 = count_targets(b2);
  ASSERT_NE(n1, n2);
  ASSERT_EQ(count_targets(both), n1 + n2);
  model::TrainOptions opt;
  opt.loss_scale = 1.0 / static_cast<double>(n1 + n2);

  lora.zero_grad();
  const double l1 = model::forward_backward(model, lora, b1, opt).loss_sum;
  const double l2 = model::forward_backward(model, lora, b2, opt).loss_sum;
  const auto accumulated = flat_grads(lora);
  lora.zero_grad();
  const double l12 = model::forward_backward(model, lora, both, opt).loss_sum;
  const auto single = flat_grads(lora);
  model.set_lora(nullptr);

  EXPECT_NEAR(l1 + l2, l12, 1e-5 * std::abs(l12));
  // fp32: the two runs sum the same per-token terms in a different grouping (and over a padded
  // (3, T) layout vs (2, T') + (1, T'')), so they agree to rounding, not bit for bit. NMSE 1e-10
  // is ~1e-5 relative per element: a few fp32 ulps accumulated over the batch sums.
  EXPECT_LT(nmse(accumulated, single), 1e-10);
}

TEST(Trainer, GradientCheckpointingGivesTheSameGradients) {
  auto model = open_fixture();
  auto lora = random_lora(model);
  model.set_lora(&lora);
  const auto ex = synthetic_examples(4, 12);
  const auto b = make_batch(ex, {0, 1, 2, 3}, false, 0);
  model::TrainOptions opt;
  opt.loss_scale = 1.0 / static_cast<double>(count_targets(b));
  lora.zero_grad();
  model::forward_backward(model, lora, b, opt);
  const auto plain = flat_grads(lora);
  opt.gradient_checkpointing = true;
  lora.zero_grad();
  model::forward_backward(model, lora, b, opt);
  const auto recomputed = flat_grads(lora);
  model.set_lora(nullptr);
  // Recomputing a layer's forward from its saved input runs the same code on the same inputs
  // with the same thread count, so the activations, and hence the gradients, are bit-identical.
  EXPECT_EQ(plain, recomputed);
}

TrainConfig tiny_config(const std::string& out) {
  TrainConfig cfg;
  cfg.base_model = kFixture;
  cfg.lora_r = 4;
  cfg.lora_alpha = 8;
  cfg.lora_target_modules = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                             model::Proj::gate, model::Proj::up, model::Proj::down};
  cfg.micro_batch_size = 4;
  cfg.gradient_accumulation_steps = 2;
  cfg.max_steps = 10;
  cfg.learning_rate = 1e-2;
  cfg.lr_scheduler = ScheduleKind::kConstant;
  cfg.output_dir = out;
  cfg.logging_steps = 1;
  cfg.seed = 3;
  return cfg;
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("medtune_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(Trainer, TenStepLossDecreasesAndOutputsAreWritten) {
  auto model = open_fixture();
  TrainData data;
  data.train = synthetic_examples(16, 21);
  data.val = synthetic_examples(4, 22);
  const auto out = temp_dir("ten_steps");
  std::ostringstream log;
  auto cfg = tiny_config(out);
  cfg.eval_steps = 100;  // before step 1 and at the end
  const auto s = run_training(cfg, model, data, {}, log);
  ASSERT_EQ(s.steps, 10);
  ASSERT_EQ(s.losses.size(), 10u);
  EXPECT_EQ(s.stop_reason, "completed");
  // Steps see different data, so compare the mean of the last three to the first three.
  const double first = (s.losses[0] + s.losses[1] + s.losses[2]) / 3;
  const double last = (s.losses[7] + s.losses[8] + s.losses[9]) / 3;
  EXPECT_LT(last, 0.8 * first) << log.str();
  EXPECT_TRUE(std::filesystem::exists(out + "/adapter/adapter_config.json"));
  EXPECT_TRUE(std::filesystem::exists(out + "/adapter/adapter_model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(out + "/config_resolved.json"));
  std::ifstream metrics(out + "/metrics.jsonl");
  int lines = 0;
  bool saw_eval = false;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval")) saw_eval = true;
    if (j.contains("step")) {
      for (const char* k : {"epoch", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "rss_bytes"})
        EXPECT_TRUE(j.contains(k)) << k;
    }
  }
  EXPECT_EQ(lines, 13);  // the eval before step 1, 10 steps, the final eval, the summary
  EXPECT_TRUE(saw_eval);
  EXPECT_EQ(model.lora(), nullptr);
  // Same seed, same data: the same losses, bit for bit.
  std::ostringstream log2;
  cfg.output_dir = temp_dir("ten_steps_again");
  const auto s2 = run_training(cfg, model, data, {}, log2);
  EXPECT_EQ(s.losses, s2.losses);
}

TEST(Trainer, StopRequestSavesTheAdapterAndStopsBetweenSteps) {
  auto model = open_fixture();
  TrainData data;
  data.train = synthetic_examples(8, 31);
  const auto out = temp_dir("stop");
  auto cfg = tiny_config(out);
  cfg.eval_steps = 100;  // the eval before step 1 runs the hook, which stands in for a SIGINT
  TrainHooks hooks;
  hooks.accuracy = [] {
    request_stop();
    return 0.25;
  };
  std::ostringstream log;
  const auto s = run_training(cfg, model, data, hooks, log);
  EXPECT_EQ(s.stop_reason, "signal");
  EXPECT_EQ(s.steps, 0);
  EXPECT_NE(log.str().find("stopped by signal after step 0; adapter saved to"), std::string::npos) << log.str();
  EXPECT_TRUE(std::filesystem::exists(out + "/adapter/adapter_config.json"));
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Issue #18, item 1: a fresh start refused because output_dir holds a finished run must not touch
// that run's manifest or resolved config (it used to rewrite both before refusing).
TEST(Trainer, RefusedFreshStartWritesNothing) {
  auto model = open_fixture();
  TrainData data;
  data.train = synthetic_examples(8, 41);
  const auto out = temp_dir("refused");
  auto cfg = tiny_config(out);
  cfg.max_steps = 2;
  std::ostringstream log;
  run_training(cfg, model, data, {}, log);
  const std::string manifest = file_text(out + "/manifest.json");
  const std::string config = file_text(out + "/config_resolved.json");
  ASSERT_NE(manifest.find("\"completed\""), std::string::npos);
  cfg.learning_rate = 5e-3;  // a changed setting, as a user retrying with another value would
  EXPECT_THROW(run_training(cfg, model, data, {}, log), BadInput);
  cfg.resume_from_checkpoint = "auto";
  EXPECT_THROW(run_training(cfg, model, data, {}, log), BadInput);
  EXPECT_EQ(file_text(out + "/manifest.json"), manifest);
  EXPECT_EQ(file_text(out + "/config_resolved.json"), config);
}

// A learning rate of 1e20 without clipping: step 1's update is huge but finite, and every later
// step's loss is NaN (the attention scores overflow).
TrainConfig blowup_config(const std::string& out) {
  auto cfg = tiny_config(out);
  cfg.learning_rate = 1e20;
  cfg.max_grad_norm = 0;
  return cfg;
}

// Issue #18, item 2: a learning rate that blows up stops the run at the first non-finite loss;
// the last checkpoint stays and no adapter is written.
TEST(Trainer, DivergedRunStopsAndWritesNoAdapter) {
  auto model = open_fixture();
  TrainData data;
  data.train = synthetic_examples(8, 43);
  const auto out = temp_dir("diverged");
  auto cfg = blowup_config(out);
  cfg.save_steps = 1;
  cfg.save_total_limit = 0;
  std::ostringstream log;
  const auto s = run_training(cfg, model, data, {}, log);
  EXPECT_EQ(s.stop_reason, "diverged");
  EXPECT_EQ(s.steps, 1) << log.str();
  EXPECT_NE(s.diverged.find("step 2: loss NaN"), std::string::npos) << s.diverged;
  EXPECT_EQ(s.checkpoint_dir, out + "/checkpoint-1");
  EXPECT_FALSE(std::filesystem::exists(out + "/adapter"));
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint-2"));
  EXPECT_NE(file_text(out + "/manifest.json").find("\"diverged\""), std::string::npos);
  EXPECT_EQ(model.lora(), nullptr);
}

// skip_nonfinite_steps: skipped steps make no update, and a checkpoint written after one resumes
// (AdamW's step count is the step minus the skipped ones).
TEST(Trainer, SkippedStepsMakeNoUpdateAndResume) {
  auto model = open_fixture();
  TrainData data;
  data.train = synthetic_examples(8, 47);
  const auto out = temp_dir("skipped");
  auto cfg = blowup_config(out);
  cfg.max_steps = 4;
  cfg.save_steps = 2;
  cfg.skip_nonfinite_steps = 10;
  std::ostringstream log;
  const auto s = run_training(cfg, model, data, {}, log);
  EXPECT_EQ(s.stop_reason, "completed");
  EXPECT_EQ(s.skipped_steps, 3) << log.str();  // steps 2, 3 and 4 see the weights of step 1
  EXPECT_TRUE(std::filesystem::exists(out + "/adapter/adapter_model.safetensors"));
  cfg.resume_from_checkpoint = out + "/checkpoint-2";
  cfg.output_dir = temp_dir("skipped_resumed");
  std::ostringstream log2;
  const auto r = run_training(cfg, model, data, {}, log2);
  EXPECT_EQ(r.skipped_steps, 3) << log2.str();
  EXPECT_EQ(r.stop_reason, "completed");
}

TEST(Trainer, PlanStepsFollowsTransformers) {
  TrainConfig cfg;
  cfg.micro_batch_size = 4;
  cfg.gradient_accumulation_steps = 3;
  cfg.num_epochs = 2;
  cfg.max_steps = -1;
  cfg.warmup_ratio = 0.1;
  const auto p = plan_steps(cfg, 30);  // 8 micro-batches per epoch, 16 in all -> ceil(16/3) = 6
  EXPECT_EQ(p.batches_per_epoch, 8);
  EXPECT_EQ(p.total_steps, 6);
  EXPECT_EQ(p.warmup_steps, 1);  // ceil(0.6)
  cfg.max_steps = 50;
  EXPECT_EQ(plan_steps(cfg, 30).total_steps, 50);
}

}  // namespace
}  // namespace medtune::train
