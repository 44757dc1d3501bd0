// Checkpoint pieces: the trainer state and AdamW moments round trip bit for bit, checksums catch
// truncation and corruption naming the file, the newest valid checkpoint is chosen, interrupted or
// failed saves leave nothing under a final name, the identity comparison explains what changed,
// and durations parse as --max-runtime takes them.
#include <unistd.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "io/atomic_file.h"
#include "support/files.h"
#include "train/batcher.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_identity.h"
#include "train/checkpoint_state.h"
#include "train/train_config.h"

namespace medtune::train {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("medtune_test_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

using testing::read_file;

TEST(CheckpointState, TrainerStateRoundTrips) {
  TrainerState s;
  s.step = 3;
  s.total_steps = 40;
  s.warmup_steps = 4;
  s.tokens = 123;
  s.input_tokens = 4567;
  // Doubles that need all 17 significant digits, and a non-finite loss (stored as null).
  s.losses = {2.0 / 3.0, 0.1 + 0.2, std::numeric_limits<double>::quiet_NaN()};
  EvalPoint e;
  e.step = 2;
  e.loss = 1.0 / 7.0;
  e.tokens = 9;
  e.accuracy = 0.25;
  s.evals = {e, EvalPoint{3, 0.5, 4, std::nullopt}};
  s.cursor = {2, 5, 17, plan_sha256({{1, 2}, {0}})};
  s.num_threads = 2;
  s.metrics_bytes = 999;
  s.elapsed_s = 12.5;
  const TrainerState r = trainer_state_from_json(nlohmann::json::parse(to_json(s).dump(2)), "state.json");
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.total_steps, s.total_steps);
  EXPECT_EQ(r.warmup_steps, s.warmup_steps);
  EXPECT_EQ(r.tokens, s.tokens);
  EXPECT_EQ(r.input_tokens, s.input_tokens);
  ASSERT_EQ(r.losses.size(), 3u);
  EXPECT_EQ(r.losses[0], s.losses[0]);  // exact: the summary of a resumed run must not drift
  EXPECT_EQ(r.losses[1], s.losses[1]);
  EXPECT_TRUE(std::isnan(r.losses[2]));
  ASSERT_EQ(r.evals.size(), 2u);
  EXPECT_EQ(r.evals[0].loss, e.loss);
  EXPECT_EQ(r.evals[0].accuracy, e.accuracy);
  EXPECT_FALSE(r.evals[1].accuracy);
  EXPECT_EQ(r.cursor, s.cursor);
  EXPECT_EQ(r.num_threads, 2);
  EXPECT_EQ(r.metrics_bytes, 999);
  EXPECT_EQ(r.elapsed_s, 12.5);
}

TEST(CheckpointState, MalformedTrainerStateNamesTheFile) {
  auto j = to_json(TrainerState{});
  j.erase("cursor");
  try {
    trainer_state_from_json(j, "ckpt/trainer_state.json");
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/trainer_state.json"), std::string::npos) << e.what();
  }
  auto k = to_json(TrainerState{});
  k["step"] = 2;  // but no losses
  EXPECT_THROW(trainer_state_from_json(k, "x"), BadInput);
}

TEST(CheckpointState, PlanHashTellsPlansApart) {
  const std::vector<int64_t> lengths{5, 9, 3, 7, 2, 8, 4};
  const BatchPlanOptions opt{2, false, 42};
  EXPECT_EQ(plan_sha256(plan_epoch(lengths, opt, 1)), plan_sha256(plan_epoch(lengths, opt, 1)));
  EXPECT_NE(plan_sha256(plan_epoch(lengths, opt, 0)), plan_sha256(plan_epoch(lengths, opt, 1)));
  // Same indices, other batching.
  EXPECT_NE(plan_sha256({{0, 1}, {2}}), plan_sha256({{0}, {1, 2}}));
}

// Two parameters with random values; moments filled by a few real AdamW steps.
struct TwoParams {
  std::vector<float> a{0.1f, -0.2f, 0.3f}, ga{0.5f, 0.25f, -1.0f};
  std::vector<float> b{1.0f, 2.0f}, gb{-0.125f, 0.75f};
  AdamW make() { return AdamW(AdamWConfig{}, {{"x.lora_A", a.data(), ga.data(), 3}, {"x.lora_B", b.data(), gb.data(), 2}}); }
};

TEST(CheckpointState, AdamWMomentsAndStepRoundTripBitForBit) {
  TwoParams p;
  AdamW opt = p.make();
  for (int i = 0; i < 3; ++i) opt.step(1e-2);
  const auto dir = temp_dir("adamw");
  write_optimizer_state(dir + "/optimizer.safetensors", opt);

  TwoParams q;
  AdamW restored = q.make();
  read_optimizer_state(dir + "/optimizer.safetensors", restored);
  EXPECT_EQ(restored.step_count(), 3);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::equal(opt.m(i).begin(), opt.m(i).end(), restored.m(i).begin()));
    EXPECT_TRUE(std::equal(opt.v(i).begin(), opt.v(i).end(), restored.v(i).begin()));
  }
  // The next step from restored moments equals the next step of the original.
  q.a = p.a;
  q.b = p.b;
  opt.step(1e-2);
  restored.step(1e-2);
  EXPECT_EQ(p.a, q.a);
  EXPECT_EQ(p.b, q.b);

  // Another LoRA shape: refused, naming the file.
  std::vector<float> c(4), gc(4);
  AdamW other(AdamWConfig{}, {{"x.lora_A", c.data(), gc.data(), 4}, {"x.lora_B", p.b.data(), p.gb.data(), 2}});
  try {
    read_optimizer_state(dir + "/optimizer.safetensors", other);
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors: tensor 'x.lora_A.exp_avg'"), std::string::npos) << e.what();
  }
}

// A checkpoint with every required file (contents arbitrary: only the folder mechanics matter).
std::string write_fake_checkpoint(const std::string& out, int64_t step) {
  std::vector<CheckpointPart> parts;
  for (const auto& f : checkpoint_files())
    parts.push_back({f, [f, step](const std::string& dir) {
                       io::atomic_write_file(dir + "/" + f, f + " of step " + std::to_string(step) + "\n");
                     }});
  return write_checkpoint_dir(out, step, parts);
}

TEST(CheckpointDir, WrittenCheckpointVerifiesAndSha256sumFormat) {
  const auto out = temp_dir("verify");
  const auto path = write_fake_checkpoint(out, 7);
  EXPECT_EQ(path, out + "/checkpoint-7");
  EXPECT_EQ(checkpoint_problem(path), "");
  EXPECT_FALSE(fs::exists(out + "/.tmp-checkpoint-7"));
  // checksums.sha256 lists every other file, in sha256sum's format.
  const std::string sums = read_file(path + "/checksums.sha256");
  for (const auto& f : checkpoint_files()) EXPECT_NE(sums.find("  " + f + "\n"), std::string::npos) << f;
  EXPECT_EQ(sums.find("checksums.sha256"), std::string::npos);
}

TEST(CheckpointDir, CorruptionTruncationAndMissingFilesAreNamed) {
  const auto out = temp_dir("corrupt");
  const auto path = write_fake_checkpoint(out, 1);
  {
    std::fstream f(path + "/trainer_state.json", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');  // same length, one byte changed
  }
  EXPECT_EQ(checkpoint_problem(path), path + "/trainer_state.json: checksum mismatch (truncated or corrupted)");

  const auto p2 = write_fake_checkpoint(out, 2);
  fs::resize_file(p2 + "/optimizer.safetensors", 3);
  EXPECT_EQ(checkpoint_problem(p2), p2 + "/optimizer.safetensors: checksum mismatch (truncated or corrupted)");

  const auto p3 = write_fake_checkpoint(out, 3);
  fs::remove(p3 + "/identity.json");
  EXPECT_EQ(checkpoint_problem(p3), p3 + "/identity.json: missing");

  const auto p4 = write_fake_checkpoint(out, 4);
  fs::remove(p4 + "/checksums.sha256");
  EXPECT_EQ(checkpoint_problem(p4), p4 + "/checksums.sha256: missing (the save did not finish)");

  // A checksums file that does not list a required file (e.g. from an older layout).
  const auto p5 = write_fake_checkpoint(out, 5);
  std::string sums = read_file(p5 + "/checksums.sha256");
  const auto at = sums.find("  adapter_config.json\n");
  sums.erase(at - 64, 64 + 22);
  io::atomic_write_file(p5 + "/checksums.sha256", sums);
  EXPECT_EQ(checkpoint_problem(p5), p5 + "/adapter_config.json: not listed in checksums.sha256");

  io::atomic_write_file(p5 + "/checksums.sha256", "not a checksum line\n");
  EXPECT_EQ(checkpoint_problem(p5), p5 + "/checksums.sha256:1: not '<sha256>  <file name>'");
}

TEST(CheckpointDir, NewestValidIsChosenAndDamagedOnesAreSkippedWithAWarning) {
  const auto out = temp_dir("newest");
  std::vector<std::string> warnings;
  EXPECT_FALSE(newest_valid_checkpoint(out, warnings));
  EXPECT_TRUE(warnings.empty());
  write_fake_checkpoint(out, 2);
  write_fake_checkpoint(out, 10);  // numeric order, not text order: 10 > 9 > 2
  write_fake_checkpoint(out, 9);
  fs::create_directories(out + "/checkpoint-x");    // not a checkpoint name: ignored
  fs::create_directories(out + "/.tmp-checkpoint-12");  // an interrupted save: ignored
  auto found = newest_valid_checkpoint(out, warnings);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 10);
  EXPECT_TRUE(warnings.empty());

  fs::resize_file(out + "/checkpoint-10/adapter_model.safetensors", 0);
  fs::remove(out + "/checkpoint-9/checksums.sha256");
  found = newest_valid_checkpoint(out, warnings);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 2);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find(out + "/checkpoint-10/adapter_model.safetensors: checksum mismatch"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[1].find(out + "/checkpoint-9/checksums.sha256: missing"), std::string::npos) << warnings[1];

  EXPECT_EQ(remove_interrupted_saves(out), std::vector<std::string>{".tmp-checkpoint-12"});
  EXPECT_FALSE(fs::exists(out + "/.tmp-checkpoint-12"));
}

TEST(CheckpointDir, PruneKeepsTheNewest) {
  const auto out = temp_dir("prune");
  for (int64_t s : {3, 6, 9, 12}) write_fake_checkpoint(out, s);
  prune_checkpoints(out, 0);  // 0: keep all
  EXPECT_EQ(list_checkpoints(out).size(), 4u);
  prune_checkpoints(out, 2);
  const auto left = list_checkpoints(out);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].step, 9);
  EXPECT_EQ(left[1].step, 12);
}

TEST(CheckpointDir, FailedSaveLeavesNothingAndNamesTheFile) {
  const auto out = temp_dir("fail");
  write_fake_checkpoint(out, 4);
  std::vector<CheckpointPart> parts{
      {"adapter_config.json", [](const std::string& dir) { io::atomic_write_file(dir + "/adapter_config.json", "{}"); }},
      {"optimizer.safetensors", [](const std::string& dir) {
         throw Internal(dir + "/optimizer.safetensors.tmp: write failed: No space left on device");
       }}};
  try {
    write_checkpoint_dir(out, 8, parts);
    FAIL();
  } catch (const Internal& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot save checkpoint-8 (optimizer.safetensors)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("optimizer.safetensors.tmp: write failed: No space left on device"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(out + "/checkpoint-8"));
  EXPECT_FALSE(fs::exists(out + "/.tmp-checkpoint-8"));
  EXPECT_EQ(checkpoint_problem(out + "/checkpoint-4"), "");  // the previous one is intact
}

TEST(CheckpointDir, SavingAStepAgainReplacesIt) {
  const auto out = temp_dir("again");
  write_fake_checkpoint(out, 5);
  fs::resize_file(out + "/checkpoint-5/identity.json", 1);  // damaged
  write_fake_checkpoint(out, 5);
  EXPECT_EQ(checkpoint_problem(out + "/checkpoint-5"), "");
  EXPECT_EQ(list_checkpoints(out).size(), 1u);
  EXPECT_TRUE(remove_interrupted_saves(out).empty());
}

TEST(CheckpointDir, StepFromFolderName) {
  EXPECT_EQ(checkpoint_step("checkpoint-0"), 0);
  EXPECT_EQ(checkpoint_step("checkpoint-120"), 120);
  EXPECT_FALSE(checkpoint_step("checkpoint-"));
  EXPECT_FALSE(checkpoint_step("checkpoint-1a"));
  EXPECT_FALSE(checkpoint_step("checkpoint--1"));
  EXPECT_FALSE(checkpoint_step(".tmp-checkpoint-3"));
  EXPECT_FALSE(checkpoint_step("checkpoint-1234567890123456789"));  // would overflow int64
}

TrainConfig identity_config(const std::string& data_path) {
  TrainConfig cfg;
  cfg.base_model = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";
  cfg.datasets = {{data_path, DatasetType::kMedqa}};
  cfg.output_dir = "/tmp/a";
  return cfg;
}

std::vector<Example> two_examples() {
  Example a, b;
  a.context = {1, 2, 3};
  a.answer = {4};
  b.context = {5};
  b.answer = {6, 7};
  return {a, b};
}

TEST(CheckpointIdentity, SameRunDespiteChangesThatDoNotAffectTraining) {
  const auto dir = temp_dir("identity_same");
  io::atomic_write_file(dir + "/train.jsonl", "{}\n");
  const TrainConfig cfg = identity_config(dir + "/train.jsonl");
  const RunIdentity a = compute_identity(cfg, two_examples(), {});
  EXPECT_EQ(a.model_files.size(), 3u);  // config.json, generation_config.json, model.safetensors
  EXPECT_EQ(a.model_files[0].name, "config.json");
  ASSERT_EQ(a.data_files.size(), 1u);
  // The file moved, and where/how often to save, log, evaluate, the time limit and threads changed.
  fs::copy_file(dir + "/train.jsonl", dir + "/moved.jsonl");
  TrainConfig moved = identity_config(dir + "/moved.jsonl");
  moved.output_dir = "/tmp/b";
  moved.save_steps = 7;
  moved.save_total_limit = 1;
  moved.logging_steps = 5;
  moved.eval_steps = 3;
  moved.num_threads = 3;
  moved.max_runtime_s = 60;
  moved.resume_from_checkpoint = "auto";
  const RunIdentity b = compute_identity(moved, two_examples(), {});
  EXPECT_EQ(identity_differences(a, b), std::vector<std::string>{});
  // And through JSON.
  const RunIdentity c = identity_from_json(nlohmann::json::parse(to_json(a).dump()), "identity.json");
  EXPECT_EQ(identity_differences(c, b), std::vector<std::string>{});
}

// The same tokens trained differently (a loss mask, as the axolotl types set) are another run;
// skip_invalid is not part of the identity (what it leaves out shows in the examples).
TEST(CheckpointIdentity, ALossMaskChangesTheExamplesHashAndSkipInvalidDoesNot) {
  const auto dir = temp_dir("identity_mask");
  io::atomic_write_file(dir + "/train.jsonl", "{}\n");
  TrainConfig cfg = identity_config(dir + "/train.jsonl");
  const RunIdentity plain = compute_identity(cfg, two_examples(), {});
  auto masked = two_examples();
  masked[1].answer_mask = {1, 0};
  const auto d = identity_differences(plain, compute_identity(cfg, masked, {}));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].find("tokenized examples differ"), std::string::npos) << d[0];
  cfg.skip_invalid = true;
  EXPECT_EQ(identity_differences(plain, compute_identity(cfg, two_examples(), {})), std::vector<std::string>{});
}

TEST(CheckpointIdentity, DifferencesSayWhatChanged) {
  const auto dir = temp_dir("identity_diff");
  io::atomic_write_file(dir + "/train.jsonl", "{}\n");
  const TrainConfig cfg = identity_config(dir + "/train.jsonl");
  const RunIdentity saved = compute_identity(cfg, two_examples(), {});

  TrainConfig lr = cfg;
  lr.learning_rate = 1e-4;
  lr.lora_r = 16;
  const auto d1 = identity_differences(saved, compute_identity(lr, two_examples(), {}));
  ASSERT_EQ(d1.size(), 2u);
  EXPECT_EQ(d1[0], "config: learning_rate 0.0002 -> 0.0001");
  EXPECT_EQ(d1[1], "config: lora_r 8 -> 16");

  io::atomic_write_file(dir + "/train.jsonl", "{\"changed\": 1}\n");
  auto other_examples = two_examples();
  other_examples[1].answer.push_back(8);
  const auto d2 = identity_differences(saved, compute_identity(cfg, other_examples, {}));
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_NE(d2[0].find("data: " + dir + "/train.jsonl has changed"), std::string::npos) << d2[0];

  // Same files, other token ids (a new tokenizer or prompt format): still refused.
  io::atomic_write_file(dir + "/train.jsonl", "{}\n");
  const auto d3 = identity_differences(saved, compute_identity(cfg, other_examples, {}));
  ASSERT_EQ(d3.size(), 1u);
  EXPECT_NE(d3[0].find("tokenized examples differ"), std::string::npos) << d3[0];

  RunIdentity model = saved;
  model.model_files[2].sha256 = std::string(64, '0');
  model.model_files.push_back({"extra.safetensors", 1, std::string(64, '1')});
  const auto d4 = identity_differences(saved, model);
  ASSERT_EQ(d4.size(), 2u);
  EXPECT_NE(d4[0].find("base model: model.safetensors has changed"), std::string::npos) << d4[0];
  EXPECT_EQ(d4[1], "base model: extra.safetensors is new");
}

TEST(Duration, ParsesTheFormsMaxRuntimeTakes) {
  EXPECT_EQ(parse_duration_s("12h"), 43200);
  EXPECT_EQ(parse_duration_s("90m"), 5400);
  EXPECT_EQ(parse_duration_s("3600s"), 3600);
  EXPECT_EQ(parse_duration_s("3600"), 3600);
  EXPECT_EQ(parse_duration_s("1h30m"), 5400);
  EXPECT_EQ(parse_duration_s("2d"), 172800);
  EXPECT_EQ(parse_duration_s("1m1"), std::nullopt);  // a bare number only on its own
  for (const char* bad : {"", "h", "12x", "0", "0s", "-5", "1.5h", "12 h", "99999999999999999999", "106751991167301d"})
    EXPECT_EQ(parse_duration_s(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace medtune::train
