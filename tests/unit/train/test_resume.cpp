// Resume through run_training on the tiny llama_gqa fixture: a run stopped and resumed (several
// times, across epoch boundaries, with gradient accumulation and dropout) ends with the same
// adapter bytes, losses and metrics as the uninterrupted run; a checkpoint of another config is
// refused naming what changed, unless forced; "auto" without a checkpoint starts fresh.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "support/files.h"
#include "train/checkpoint_dir.h"
#include "train/run_manifest.h"
#include "train/trainer.h"

namespace medtune::train {
namespace {

namespace fs = std::filesystem;

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

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

TrainConfig config(const std::string& out) {
  TrainConfig cfg;
  cfg.base_model = kFixture;
  cfg.lora_r = 4;
  cfg.lora_alpha = 8;
  cfg.lora_dropout = 0.1;  // per-step masks: the resumed steps must draw the same ones
  cfg.lora_target_modules = {model::Proj::q, model::Proj::v, model::Proj::down};
  cfg.micro_batch_size = 3;  // 10 examples: 4 micro-batches per epoch, the last one short
  cfg.gradient_accumulation_steps = 3;  // so steps straddle epoch boundaries
  cfg.group_by_length = true;
  cfg.max_steps = 9;
  cfg.learning_rate = 1e-2;
  cfg.lr_scheduler = ScheduleKind::kCosine;
  cfg.warmup_steps = 2;
  cfg.weight_decay = 0.01;
  cfg.save_steps = 2;
  cfg.save_total_limit = 2;
  cfg.eval_steps = 3;
  cfg.output_dir = out;
  cfg.seed = 5;
  return cfg;
}

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("medtune_test_resume_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

using testing::read_file;

// metrics.jsonl without the fields that depend on wall time and memory.
std::string metrics_without_timing(const std::string& path) {
  std::ifstream in(path);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"tokens_per_s", "elapsed_s", "rss_bytes"}) j.erase(k);
    if (j.contains("summary")) j["summary"].erase("elapsed_s");
    out += j.dump() + "\n";
  }
  return out;
}

struct Fixture {
  model::LlamaModel model{io::open_checkpoint(kFixture)};
  TrainData data;
  Fixture() {
    data.train = examples(10, 1);
    data.val = examples(3, 2);
  }
};

// Stops the run at the evaluation after the `stop_at`-th call (evaluations run at steps 0, 3, 6).
TrainHooks stopping_hooks(int* calls, int stop_at) {
  TrainHooks h;
  h.accuracy = [calls, stop_at] {
    if (++*calls == stop_at) request_stop();
    return 0.5;
  };
  return h;
}

// Runs the config uninterrupted, then in three slices (two stops, a damaged checkpoint), and
// compares everything the two leave behind.
void check_sliced_run_equals_uninterrupted(bool packing) {
  Fixture f;
  auto with_packing = [packing](TrainConfig c) {
    if (packing) {
      c.sample_packing = true;  // rows of 16 tokens holding several examples each
      c.sequence_len = 16;
      c.micro_batch_size = 1;
    }
    return c;
  };
  const auto ref_dir = fresh_dir(packing ? "reference_packed" : "reference");
  std::ostringstream log;
  int calls = 0;
  const auto ref = run_training(with_packing(config(ref_dir)), f.model, f.data, stopping_hooks(&calls, -1), log);
  ASSERT_EQ(ref.steps, 9);

  const auto dir = fresh_dir(packing ? "sliced_packed" : "sliced");
  auto cfg = with_packing(config(dir));
  calls = 0;
  // Slice 1: stops at the evaluation of step 3 (the 2nd call): checkpoint-3 (the stop) and
  // checkpoint-2 (save_steps) exist.
  auto s1 = run_training(cfg, f.model, f.data, stopping_hooks(&calls, 2), log);
  ASSERT_EQ(s1.stop_reason, "signal");
  ASSERT_EQ(s1.steps, 3);
  EXPECT_EQ(s1.checkpoint_dir, dir + "/checkpoint-3");
  // Slice 2: resumes from 3; stops at the evaluation of step 6 (the 3rd call overall).
  cfg.resume_from_checkpoint = "auto";
  auto s2 = run_training(cfg, f.model, f.data, stopping_hooks(&calls, 3), log);
  ASSERT_EQ(s2.resumed_from, dir + "/checkpoint-3");
  ASSERT_EQ(s2.steps, 6);
  // A damaged newest checkpoint: skipped with a warning, the previous one (step 4) is used.
  fs::resize_file(dir + "/checkpoint-6/optimizer.safetensors", 10);
  std::ostringstream log3;
  const auto s3 = run_training(cfg, f.model, f.data, stopping_hooks(&calls, -1), log3);
  EXPECT_EQ(s3.resumed_from, dir + "/checkpoint-4");
  EXPECT_NE(log3.str().find("skipping " + dir + "/checkpoint-6: " + dir +
                            "/checkpoint-6/optimizer.safetensors: checksum mismatch"),
            std::string::npos)
      << log3.str();
  EXPECT_EQ(s3.stop_reason, "completed");
  EXPECT_EQ(s3.steps, 9);

  EXPECT_EQ(s3.losses, ref.losses);
  EXPECT_EQ(s3.tokens, ref.tokens);
  EXPECT_EQ(s3.input_tokens, ref.input_tokens);
  ASSERT_EQ(s3.evals.size(), ref.evals.size());
  for (size_t i = 0; i < ref.evals.size(); ++i) {
    EXPECT_EQ(s3.evals[i].step, ref.evals[i].step);
    EXPECT_EQ(s3.evals[i].loss, ref.evals[i].loss);
  }
  for (const char* file : {"adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                           "checkpoint-9/optimizer.safetensors", "checkpoint-9/adapter_model.safetensors"})
    EXPECT_EQ(read_file(dir + "/" + file), read_file(ref_dir + "/" + file)) << file;
  // The log of the resumed run holds each step once, as the uninterrupted one does.
  EXPECT_EQ(metrics_without_timing(dir + "/metrics.jsonl"), metrics_without_timing(ref_dir + "/metrics.jsonl"));
  // save_total_limit 2: the newest two remain.
  const auto left = list_checkpoints(dir);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].step, 8);
  EXPECT_EQ(left[1].step, 9);

  // Resuming the finished run takes no step and writes the same adapter again.
  const auto s4 = run_training(cfg, f.model, f.data, {}, log);
  EXPECT_EQ(s4.steps, 9);
  EXPECT_EQ(s4.losses, ref.losses);
  EXPECT_EQ(read_file(dir + "/adapter/adapter_model.safetensors"), read_file(ref_dir + "/adapter/adapter_model.safetensors"));
}

TEST(Resume, StoppedAndResumedRunEqualsTheUninterruptedOneBitForBit) { check_sliced_run_equals_uninterrupted(false); }

// With sequence packing the cursor walks packed rows; the same guarantee holds.
TEST(Resume, PackedRunResumesBitForBit) { check_sliced_run_equals_uninterrupted(true); }

TEST(Resume, AnotherConfigIsRefusedUnlessForced) {
  Fixture f;
  const auto dir = fresh_dir("refuse");
  auto cfg = config(dir);
  cfg.eval_steps = 0;
  cfg.max_steps = 2;
  std::ostringstream log;
  run_training(cfg, f.model, f.data, {}, log);
  cfg.resume_from_checkpoint = dir + "/checkpoint-2";
  cfg.learning_rate = 5e-3;
  try {
    run_training(cfg, f.model, f.data, {}, log);
    FAIL();
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot resume from " + dir + "/checkpoint-2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("config: learning_rate 0.01 -> 0.005"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--force-resume"), std::string::npos) << msg;
  }
  // Other data.
  cfg.learning_rate = 1e-2;
  TrainData other = f.data;
  other.train[0].answer[0] = 50;
  EXPECT_THROW(run_training(cfg, f.model, other, {}, log), BadInput);
  // Forced: continues, saying why it should not have.
  cfg.learning_rate = 5e-3;
  TrainHooks force;
  force.force_resume = true;
  std::ostringstream flog;
  const auto s = run_training(cfg, f.model, f.data, force, flog);
  EXPECT_EQ(s.resumed_from, dir + "/checkpoint-2");
  EXPECT_NE(flog.str().find("warning: --force-resume"), std::string::npos) << flog.str();
  // A damaged explicit checkpoint is an error naming the file, not a silent fallback.
  fs::resize_file(dir + "/checkpoint-2/trainer_state.json", 5);
  try {
    run_training(cfg, f.model, f.data, force, flog);
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint-2/trainer_state.json: checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(Resume, AutoWithoutACheckpointStartsFreshAndAdapterMetadataIsWritten) {
  Fixture f;
  const auto dir = fresh_dir("fresh");
  auto cfg = config(dir);
  cfg.eval_steps = 0;
  cfg.max_steps = 1;
  cfg.save_steps = 0;  // still a checkpoint at the end
  cfg.resume_from_checkpoint = "auto";
  TrainHooks hooks;
  hooks.adapter_metadata = {{"medtune.manifest_sha256", "abc"}};
  // A damaged checkpoint of an earlier run: not resumable. Starting fresh would have to delete it
  // (else a later --resume auto could take it for this run's), so that is refused and the folder
  // kept, unless the user asks for the old run to be replaced.
  fs::create_directories(dir + "/checkpoint-50");
  std::ostringstream refused_log;
  try {
    run_training(cfg, f.model, f.data, hooks, refused_log);
    FAIL() << "a fresh start over an earlier run's checkpoints was not refused";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite-output-dir"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir + "/checkpoint-50"));
  EXPECT_NE(refused_log.str().find("skipping " + dir + "/checkpoint-50: " + dir + "/checkpoint-50/checksums.sha256: missing"),
            std::string::npos)
      << refused_log.str();
  EXPECT_EQ(refused_log.str().find("starting fresh"), std::string::npos)
      << "a run that is refused must not say it starts fresh:\n" << refused_log.str();

  hooks.overwrite_output_dir = true;
  std::ostringstream log;
  const auto s = run_training(cfg, f.model, f.data, hooks, log);
  EXPECT_EQ(s.resumed_from, "");
  EXPECT_NE(log.str().find("removed " + dir + "/checkpoint-50 (--overwrite-output-dir: this run starts fresh)"),
            std::string::npos)
      << log.str();
  EXPECT_FALSE(fs::exists(dir + "/checkpoint-50"));
  EXPECT_EQ(checkpoint_problem(dir + "/checkpoint-1"), "");
  for (const char* file : {"/adapter/adapter_model.safetensors", "/checkpoint-1/adapter_model.safetensors"}) {
    EXPECT_NE(read_file(dir + file).find("\"medtune.manifest_sha256\":\"abc\""), std::string::npos) << file;
    EXPECT_NE(read_file(dir + file).find(kAdapterManifestKey), std::string::npos) << file;
  }
}

}  // namespace
}  // namespace medtune::train
