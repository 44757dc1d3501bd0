// The training config: every example in configs/ loads, defaults, each class of error with the
// message a user sees, command-line overrides, and to_yaml / to_json reading back to an equal
// config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/checkpoint_identity.h"
#include "train/train_config.h"

namespace medtune::train {
// gtest prints a failing comparison through this: the resolved JSON and the warnings.
void PrintTo(const TrainConfig& c, std::ostream* os) {
  *os << to_json(c).dump(1);
  for (const std::string& w : c.warnings) *os << "\nwarning: " << w;
}
}  // namespace medtune::train

namespace medtune {
namespace {

namespace fs = std::filesystem;
using train::TrainConfig;

const std::string kSource = MEDTUNE_SOURCE_DIR;

// A scratch directory per test process (removed at exit); configs are written there and named in
// messages.
struct ScratchDir {
  fs::path path =
      fs::temp_directory_path() / ("medtune_test_train_config_" + std::to_string(getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path scratch() {
  static const ScratchDir dir;
  return dir.path;
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = (scratch() / name).string();
  std::ofstream(path) << text;
  return path;
}

// The smallest valid config; tests append the lines they are about.
const std::string kMinimal =
    "base_model: models/m.gguf\n"
    "datasets:\n"
    "  - path: data/train.jsonl\n"
    "    type: medqa\n";

// The BadInput message of loading `text` (with overrides), or "" when it loads.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {},
                     const std::string& name = "cfg.yaml") {
  const std::string path = write_config(name, text);
  try {
    train::load_train_config(path, overrides);
  } catch (const BadInput& e) {
    return e.what();
  }
  return "";
}

std::string cfg_path(const std::string& name = "cfg.yaml") {
  return (scratch() / name).string();
}

TrainConfig load_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return train::load_train_config(write_config("ok.yaml", text), overrides);
}

std::vector<fs::path> example_configs() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(kSource + "/configs"))
    if (entry.path().extension() == ".yaml") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TrainConfig, EveryExampleConfigLoadsAndStartsWithItsCommand) {
  const std::vector<fs::path> configs = example_configs();
  ASSERT_GE(configs.size(), 3u);
  for (const fs::path& p : configs) {
    SCOPED_TRACE(p.string());
    EXPECT_NO_THROW(train::load_train_config(p.string(), {}));
    std::ifstream in(p);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "# ./build/medtune train --config configs/" + p.filename().string());
  }
}

TEST(TrainConfig, EmbeddedDefaultConfig) {
  const TrainConfig c = train::load_train_config(kSource + "/configs/smollm2-medqa-lora.yaml", {});
  EXPECT_EQ(c.base_model, (fs::current_path() / "models/SmolLM2-135M-Instruct.Q4_1.gguf").string());
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].path, (fs::current_path() / "data/sample/medqa_train.jsonl").string());
  EXPECT_EQ(c.datasets[0].type, train::DatasetType::kMedqa);
  ASSERT_EQ(c.test_datasets.size(), 1u);
  EXPECT_EQ(c.adapter, train::AdapterKind::kLora);
  EXPECT_EQ(c.base_quant, train::BaseQuant::kNone);
  EXPECT_EQ(c.lora_r, 8);
  EXPECT_EQ(c.lora_target_modules.size(), 7u);  // lora_target_linear
  EXPECT_EQ(c.sequence_len, 512);
  EXPECT_EQ(c.micro_batch_size, 4);
  EXPECT_GT(c.max_steps, 0);
  EXPECT_LE(c.max_steps, 100);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(TrainConfig, SeedRecipes) {
  const TrainConfig lora =
      train::load_train_config(kSource + "/configs/llama2-7b-lora-r16-attn.yaml", {});
  EXPECT_EQ(lora.lora_r, 16);
  EXPECT_EQ(lora.lora_target_modules, (std::vector<model::Proj>{model::Proj::q, model::Proj::k,
                                                                model::Proj::v, model::Proj::o}));
  EXPECT_TRUE(lora.gradient_checkpointing);
  EXPECT_EQ(lora.micro_batch_size, 8);
  ASSERT_EQ(lora.warnings.size(), 1u);  // bf16: true
  EXPECT_NE(lora.warnings[0].find("'bf16' ignored"), std::string::npos) << lora.warnings[0];

  const TrainConfig q = train::load_train_config(kSource + "/configs/llama2-7b-qlora-r64.yaml", {});
  EXPECT_EQ(q.adapter, train::AdapterKind::kQlora);
  EXPECT_TRUE(q.load_in_4bit);
  EXPECT_EQ(q.base_quant, train::BaseQuant::kNf4);
  EXPECT_EQ(q.lora_r, 64);
  EXPECT_EQ(q.lora_alpha, 128.0);
  EXPECT_EQ(q.lora_target_modules.size(), 7u);
  EXPECT_EQ(q.learning_rate, 2e-4);
  EXPECT_EQ(q.lr_scheduler, train::ScheduleKind::kCosine);
  EXPECT_EQ(q.micro_batch_size, 8);
  EXPECT_EQ(q.max_steps, 3000);
  EXPECT_EQ(q.resume_from_checkpoint, "auto");
  EXPECT_EQ(q.max_runtime_s, 12 * 3600);
}

TEST(TrainConfig, Defaults) {
  const TrainConfig c = load_text(kMinimal);
  EXPECT_EQ(c.adapter, train::AdapterKind::kLora);
  EXPECT_FALSE(c.load_in_4bit);
  EXPECT_EQ(c.base_quant, train::BaseQuant::kNone);
  EXPECT_EQ(c.lora_r, 8);
  EXPECT_EQ(c.lora_alpha, 16.0);
  EXPECT_EQ(c.lora_dropout, 0.0);
  EXPECT_EQ(c.lora_target_modules,
            (std::vector<model::Proj>{model::Proj::q, model::Proj::v}));  // PEFT's
  EXPECT_FALSE(c.peft_use_rslora);
  EXPECT_TRUE(c.test_datasets.empty());
  EXPECT_EQ(c.val_set_fraction, 0.0);
  EXPECT_EQ(c.val_set_count, 0);
  EXPECT_EQ(c.sequence_len, 512);
  EXPECT_FALSE(c.sample_packing);
  EXPECT_FALSE(c.group_by_length);
  EXPECT_FALSE(c.train_on_inputs);
  EXPECT_EQ(c.prompt_format, train::PromptFormat::kLmEval);
  EXPECT_EQ(c.system_prompt, "You are a clinician; choose the single best option.");
  EXPECT_EQ(c.micro_batch_size, 1);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.num_epochs, 1.0);
  EXPECT_EQ(c.max_steps, -1);
  EXPECT_EQ(c.learning_rate, 2e-4);
  EXPECT_EQ(c.lr_scheduler, train::ScheduleKind::kCosine);
  EXPECT_EQ(c.warmup_steps, 0);
  EXPECT_FALSE(c.warmup_ratio.has_value());
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.adam_beta1, 0.9);
  EXPECT_EQ(c.adam_beta2, 0.999);
  EXPECT_EQ(c.adam_epsilon, 1e-8);
  EXPECT_EQ(c.max_grad_norm, 1.0);
  EXPECT_FALSE(c.gradient_checkpointing);
  EXPECT_EQ(c.seed, 42);
  EXPECT_EQ(c.output_dir, (fs::current_path() / "outputs/run").string());
  EXPECT_EQ(c.save_steps, 0);
  EXPECT_EQ(c.save_total_limit, 3);
  EXPECT_EQ(c.eval_steps, 0);
  EXPECT_EQ(c.logging_steps, 1);
  EXPECT_EQ(c.num_threads, 0);
  EXPECT_EQ(c.max_runtime_s, 0);
  EXPECT_EQ(c.resume_from_checkpoint, "");
  EXPECT_TRUE(c.warnings.empty());

  // A key left empty (null) keeps its default, as in axolotl's example configs.
  EXPECT_EQ(load_text(kMinimal + "lora_r:\nlearning_rate: ~\n"), c);
}

TEST(TrainConfig, RelativePathsResolveAgainstTheWorkingDirectory) {
  const TrainConfig c =
      load_text(kMinimal + "output_dir: ../runs/x\nresume_from_checkpoint: ck/step-10\n");
  const fs::path cwd = fs::current_path();
  EXPECT_EQ(c.base_model, (cwd / "models/m.gguf").string());
  EXPECT_EQ(c.output_dir, (cwd.parent_path() / "runs/x").string());
  EXPECT_EQ(c.resume_from_checkpoint, (cwd / "ck/step-10").string());
  const TrainConfig abs =
      load_text("base_model: /m/x.gguf\ndatasets: [{path: /d/t.jsonl, type: chat}]\n");
  EXPECT_EQ(abs.base_model, "/m/x.gguf");
  EXPECT_EQ(abs.datasets[0].path, "/d/t.jsonl");
  EXPECT_EQ(abs.datasets[0].type, train::DatasetType::kChat);
}

TEST(TrainConfig, UnknownKeySuggestsTheClosest) {
  EXPECT_EQ(error_of(kMinimal + "lora_rank: 16\n"),
            cfg_path() +
                ":5: unknown key 'lora_rank'; did you mean 'lora_r'? "
                "(docs/configuration.md lists every key)");
  EXPECT_NE(error_of(kMinimal + "learning_rat: 1\n").find("did you mean 'learning_rate'?"),
            std::string::npos);
  // transformers / TRL names that edit distance would not find.
  EXPECT_NE(error_of(kMinimal + "num_train_epochs: 3\n").find("did you mean 'num_epochs'?"),
            std::string::npos);
  // Nothing close: no suggestion.
  const std::string far = error_of(kMinimal + "colour_scheme: dark\n");
  EXPECT_NE(far.find(":5: unknown key 'colour_scheme'"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  // Inside a dataset entry.
  EXPECT_EQ(
      error_of("base_model: m.gguf\ndatasets:\n  - path: t.jsonl\n    typ: medqa\n"),
      cfg_path() +
          ":4: unknown key 'typ' in datasets[0] (valid: path, type, split and axolotl's field_*, "
          "message_property_mappings, roles_to_train, train_on_eos; medmcqa's cop_base); did you mean 'type'?");
}

TEST(TrainConfig, WrongTypes) {
  EXPECT_EQ(error_of(kMinimal + "micro_batch_size: eight\n"),
            cfg_path() + ":5: 'micro_batch_size' must be a positive integer, got 'eight'");
  EXPECT_EQ(error_of(kMinimal + "lora_r: 8.0\n"),
            cfg_path() + ":5: 'lora_r' must be a positive integer, got '8.0'");
  EXPECT_EQ(error_of(kMinimal + "learning_rate: fast\n"),
            cfg_path() + ":5: 'learning_rate' must be a number > 0, got 'fast'");
  EXPECT_EQ(error_of(kMinimal + "sample_packing: maybe\n"),
            cfg_path() + ":5: 'sample_packing' must be true or false, got 'maybe'");
  EXPECT_EQ(
      error_of(kMinimal + "lora_target_modules: [q_proj, qkv_proj]\n"),
      cfg_path() +
          ":5: 'lora_target_modules' must be a list of q_proj, k_proj, v_proj, o_proj, gate_proj, "
          "up_proj, down_proj, got 'qkv_proj'; did you mean 'q_proj'?");
  EXPECT_EQ(error_of(kMinimal + "lr_scheduler: cosin\n"),
            cfg_path() +
                ":5: 'lr_scheduler' must be one of cosine, linear, constant, constant_with_warmup, "
                "got 'cosin'; did you mean 'cosine'?");
  EXPECT_EQ(error_of(kMinimal + "adapter: [lora]\n"),
            cfg_path() + ":5: 'adapter' must be one of lora, qlora, got a list");
  // axolotl's deprecated sharegpt type (its chat_template reads ShareGPT files).
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - path: t.jsonl\n    type: sharegpt\n"),
            cfg_path() + ":4: 'datasets[0].type' must be one of medqa, chat, alpaca, completion, input_output, "
                         "chat_template, medqa_4options, medmcqa, pubmedqa, mmlu_anatomy, mmlu_clinical_knowledge, "
                           "mmlu_college_biology, mmlu_college_medicine, mmlu_medical_genetics, "
                           "mmlu_professional_medicine, got 'sharegpt'");
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets: data/train.jsonl\n"),
            cfg_path() + ":2: 'datasets' must be a list of {path, type}, got 'data/train.jsonl'");
  EXPECT_EQ(error_of(kMinimal + "max_runtime: soon\n"),
            cfg_path() +
                ":5: 'max_runtime' must be a duration like 12h, 90m, 1h30m or 3600s, got 'soon'");
  // YAML's own scalar rules: quoted numbers read as numbers (as pydantic coerces them for axolotl),
  // 2e-4 is a float although YAML 1.1 would call it a string.
  EXPECT_EQ(load_text(kMinimal + "lora_r: \"16\"\nlearning_rate: 2e-4\n").lora_r, 16);
}

TEST(TrainConfig, Ranges) {
  struct Case {
    std::string line, message;
  };
  const std::vector<Case> cases = {
      {"lora_r: 0", "'lora_r' must be a positive integer, got '0'"},
      {"learning_rate: 0", "'learning_rate' must be a number > 0, got '0'"},
      {"learning_rate: -1e-4", "'learning_rate' must be a number > 0, got '-1e-4'"},
      {"lora_dropout: 1.0", "'lora_dropout' must be a number in [0, 1), got '1.0'"},
      {"lora_alpha: 0", "'lora_alpha' must be a number > 0, got '0'"},
      {"sequence_len: 8", "'sequence_len' must be an integer between 16 and 1048576, got '8'"},
      {"micro_batch_size: 0", "'micro_batch_size' must be a positive integer, got '0'"},
      {"gradient_accumulation_steps: -2",
       "'gradient_accumulation_steps' must be a positive integer, got '-2'"},
      {"num_epochs: 0", "'num_epochs' must be a number > 0, got '0'"},
      {"max_steps: 0", "'max_steps' must be -1 (from num_epochs) or a positive integer, got '0'"},
      {"warmup_steps: -1", "'warmup_steps' must be an integer >= 0, got '-1'"},
      {"warmup_ratio: 1.5", "'warmup_ratio' must be a number in [0, 1), got '1.5'"},
      {"weight_decay: -0.1", "'weight_decay' must be a number >= 0, got '-0.1'"},
      {"adam_beta2: 1", "'adam_beta2' must be a number in [0, 1), got '1'"},
      {"max_grad_norm: -1", "'max_grad_norm' must be a number >= 0, got '-1'"},
      {"seed: -1", "'seed' must be an integer in [0, 2^32), got '-1'"},
      {"logging_steps: 0", "'logging_steps' must be a positive integer, got '0'"},
      {"val_set_size: 1.5",
       "'val_set_size' must be a fraction in [0, 1) or a whole number of items, got '1.5'"},
      {"learning_rate: .inf", "'learning_rate' must be a number > 0, got '.inf'"},
      {"lora_r: 99999999999999999999",
       "'lora_r' must be a positive integer, got '99999999999999999999'"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(error_of(kMinimal + c.line + "\n"), cfg_path() + ":5: " + c.message);
}

TEST(TrainConfig, MissingRequired) {
  EXPECT_EQ(error_of("datasets: [{path: t.jsonl, type: medqa}]\n"),
            cfg_path() + ": missing required key 'base_model' (an HF directory or a .gguf file)");
  EXPECT_EQ(error_of("base_model: m.gguf\n"),
            cfg_path() + ": missing required key 'datasets' (a list of {path, type})");
  EXPECT_EQ(error_of(""),
            cfg_path() + ": missing required key 'base_model' (an HF directory or a .gguf file)");
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - type: medqa\n"),
            cfg_path() + ":3: datasets[0] has no 'path'");
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - path: t.jsonl\n"),
            cfg_path() + ":3: datasets[0] has no 'type' (medqa, chat, alpaca, completion, input_output, chat_template or "
                           "one of the nine lm-eval task names, docs/configuration.md)");
}

TEST(TrainConfig, Contradictions) {
  EXPECT_EQ(error_of(kMinimal + "warmup_steps: 10\nwarmup_ratio: 0.1\n"),
            cfg_path() + ":6: 'warmup_ratio' and 'warmup_steps' (" + cfg_path() +
                ":5) are exclusive; set one of them");
  EXPECT_EQ(error_of(kMinimal + "adapter: qlora\nload_in_4bit: false\n"),
            cfg_path() +
                ":6: 'load_in_4bit: false' contradicts 'adapter: qlora' (QLoRA is a 4-bit base); "
                "remove one");
  EXPECT_EQ(
      error_of(kMinimal + "load_in_4bit: true\n"),
      cfg_path() +
          ":5: 'load_in_4bit: true' needs 'adapter: qlora' (a 4-bit base with LoRA is QLoRA)");
  EXPECT_EQ(
      error_of(kMinimal + "adapter: qlora\nbase_quant: none\n"),
      cfg_path() +
          ":6: 'base_quant: none' contradicts 'adapter: qlora' (QLoRA quantizes the base to nf4)");
  EXPECT_NE(
      error_of(kMinimal + "val_set_size: 0.1\ntest_datasets: [{path: d.jsonl, type: medqa}]\n")
          .find(":5: 'val_set_size' and 'test_datasets'"),
      std::string::npos);
  EXPECT_EQ(
      error_of(kMinimal + "eval_steps: 50\n"),
      cfg_path() + ":5: 'eval_steps' needs an evaluation set: set val_set_size or test_datasets");
  EXPECT_NE(
      error_of(kMinimal + "seed: 1\nseed: 2\n").find(":6: duplicate key 'seed' (first at line 5)"),
      std::string::npos);
  // qlora alone implies the rest.
  const TrainConfig q = load_text(kMinimal + "adapter: qlora\n");
  EXPECT_TRUE(q.load_in_4bit);
  EXPECT_EQ(q.base_quant, train::BaseQuant::kNf4);
}

TEST(TrainConfig, AxolotlKeysMedtuneDoesNotImplement) {
  // Harmless here: accepted with a warning that names the line.
  const TrainConfig w =
      load_text(kMinimal + "bf16: true\nflash_attention: true\nfp16: false\ntf32:\n");
  ASSERT_EQ(w.warnings.size(), 2u);
  EXPECT_EQ(w.warnings[0].rfind(cfg_path("ok.yaml") + ":5: 'bf16' ignored: ", 0), 0u)
      << w.warnings[0];
  EXPECT_EQ(w.warnings[1].rfind(cfg_path("ok.yaml") + ":6: 'flash_attention' ignored: ", 0), 0u)
      << w.warnings[1];
  // Would change the result: rejected when set, fine when left empty.
  EXPECT_EQ(error_of(kMinimal + "deepspeed: deepspeed_configs/zero2.json\n"),
            cfg_path() +
                ":5: 'deepspeed' is not supported by medtune (DeepSpeed shards training through "
                "PyTorch)");
  EXPECT_NE(error_of(kMinimal + "fsdp: [full_shard, auto_wrap]\n")
                .find(":5: 'fsdp' is not supported by medtune"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal + "special_tokens:\n  pad_token: \"<pad>\"\n")
                .find("not supported by medtune"),
            std::string::npos);
  EXPECT_NO_THROW(load_text(kMinimal + "deepspeed:\nfsdp:\nfsdp_config:\nload_in_8bit: false\n"));
  EXPECT_NE(error_of(kMinimal + "optimizer: adamw_bnb_8bit\n")
                .find("optimizer 'adamw_bnb_8bit' is not supported by medtune"),
            std::string::npos);

  // axolotl's own QLoRA example, as users copy it.
  const TrainConfig ax =
      train::load_train_config(kSource + "/tests/fixtures/train_config/axolotl_qlora.yml", {});
  EXPECT_EQ(ax.adapter, train::AdapterKind::kQlora);
  EXPECT_EQ(ax.lora_target_modules.size(), 7u);
  EXPECT_EQ(ax.val_set_fraction, 0.05);
  EXPECT_EQ(ax.learning_rate, 2e-4);
  std::string all;
  for (const std::string& s : ax.warnings) all += s + "\n";
  for (const char* key : {"'model_type'", "'bf16'", "'flash_attention'", "'evals_per_epoch'",
                          "optimizer 'paged_adamw_32bit'", "eval_steps is 0"})
    EXPECT_NE(all.find(key), std::string::npos) << key << " not in\n" << all;
}

TEST(TrainConfig, Overrides) {
  const TrainConfig c =
      load_text(kMinimal + "lora_r: 8\n",
                {"lora_r=16", "lora_target_modules=[q_proj,v_proj,down_proj]", "learning_rate=1e-4",
                 "max_runtime=90m", "val_set_size=200", "datasets=[{path: /x/a.jsonl, type: chat}]",
                 "system_prompt=Answer: one letter"});
  EXPECT_EQ(c.lora_r, 16);
  EXPECT_EQ(c.lora_target_modules,
            (std::vector<model::Proj>{model::Proj::q, model::Proj::v, model::Proj::down}));
  EXPECT_EQ(c.learning_rate, 1e-4);
  EXPECT_EQ(c.max_runtime_s, 5400);
  EXPECT_EQ(c.val_set_count, 200);
  EXPECT_EQ(c.datasets,
            (std::vector<train::DatasetSpec>{{"/x/a.jsonl", train::DatasetType::kChat}}));
  EXPECT_EQ(c.system_prompt, "Answer: one letter");
  // An empty value restores the default; the last override of a key wins.
  EXPECT_EQ(load_text(kMinimal + "lora_r: 32\n", {"lora_r="}).lora_r, 8);
  EXPECT_EQ(load_text(kMinimal, {"seed=1", "seed=7"}).seed, 7);

  EXPECT_EQ(error_of(kMinimal, {"lora_rnk=16"}),
            "command line: unknown key 'lora_rnk'; did you mean 'lora_r'? (docs/configuration.md "
            "lists every key)");
  EXPECT_EQ(error_of(kMinimal, {"lora_r=sixteen"}),
            "command line: 'lora_r' must be a positive integer, got 'sixteen'");
  EXPECT_EQ(error_of(kMinimal, {"lora_r"}),
            "command line: override 'lora_r' must be key=value (e.g. lora_r=16)");
  EXPECT_NE(error_of(kMinimal, {"lora_target_modules=[q_proj"})
                .find("command line: cannot parse the value"),
            std::string::npos);
  EXPECT_EQ(error_of(kMinimal, {"deepspeed=zero3.json"}),
            "command line: 'deepspeed' is not supported by medtune (DeepSpeed shards training "
            "through PyTorch)");
}

TEST(TrainConfig, DeviceKey) {
  EXPECT_EQ(load_text(kMinimal).device, "cpu");
  EXPECT_EQ(load_text(kMinimal + "device: gpu:1\n").device, "gpu:1");
  EXPECT_EQ(load_text(kMinimal, {"device=gpu"}).device, "gpu");
  EXPECT_EQ(error_of(kMinimal + "device: cuda\n"),
            cfg_path() + ":5: device: 'cuda' is not a device; use cpu, gpu or gpu:N (N = 0, 1, ...)");
  // LoRA dropout draws the same masks on a device (ops/dropout.h): accepted with any device.
  EXPECT_EQ(load_text(kMinimal + "lora_dropout: 0.05\ndevice: gpu\n").lora_dropout, 0.05);
  // precision: auto by default; bf16 on either device.
  EXPECT_EQ(load_text(kMinimal).precision, "auto");
  EXPECT_EQ(load_text(kMinimal + "device: gpu\nprecision: bf16\n").precision, "bf16");
  EXPECT_EQ(load_text(kMinimal + "precision: bf16\n").precision, "bf16");
  EXPECT_EQ(error_of(kMinimal + "precision: half\n"),
            cfg_path() + ":5: precision: 'half' is not a precision; use fp32, bf16, int8 or auto (bf16 on a GPU, fp32 on the CPU)");
  // int8 is inference only: refused at load, naming the key.
  EXPECT_NE(error_of(kMinimal + "precision: int8\n").find(cfg_path() + ":5: 'precision: int8' is for inference"),
            std::string::npos)
      << error_of(kMinimal + "precision: int8\n");
}

// bf16_weight_copy: auto by default, true or false, named when wrong, and not part of a run's
// identity (the copy holds the values a step would round anyway: the same bits).
TEST(TrainConfig, Bf16WeightCopyKey) {
  const TrainConfig d = load_text(kMinimal);
  EXPECT_EQ(d.bf16_weight_copy, "auto");
  const TrainConfig t = load_text(kMinimal + "bf16_weight_copy: true\n");
  EXPECT_EQ(t.bf16_weight_copy, "true");
  EXPECT_EQ(load_text(kMinimal, {"bf16_weight_copy=false"}).bf16_weight_copy, "false");
  EXPECT_EQ(error_of(kMinimal + "bf16_weight_copy: yes please\n"),
            cfg_path() + ":5: 'bf16_weight_copy' must be one of auto, true, false, got 'yes please'");
  EXPECT_EQ(train::training_relevant_config(d), train::training_relevant_config(t));
}

// max_device_memory: auto by default, a size with a binary or decimal unit, named when wrong,
// written back to the same value, a warning on the CPU (where it does nothing), and not part of
// a run's identity (it moves memory: the passes sum the same gradients in another order).
TEST(TrainConfig, MaxDeviceMemoryKey) {
  const TrainConfig d = load_text(kMinimal);
  EXPECT_EQ(d.max_device_memory, 0);
  EXPECT_TRUE(d.warnings.empty());
  const TrainConfig g = load_text(kMinimal + "device: gpu\nmax_device_memory: 8GiB\n");
  EXPECT_EQ(g.max_device_memory, 8.0 * 1024 * 1024 * 1024);
  EXPECT_TRUE(g.warnings.empty());
  EXPECT_EQ(load_text(kMinimal + "device: gpu\nmax_device_memory: 16GB\n").max_device_memory, 16e9);
  EXPECT_EQ(load_text(kMinimal + "device: gpu\nmax_device_memory: 512 MiB\n").max_device_memory,
            512.0 * 1024 * 1024);
  EXPECT_EQ(load_text(kMinimal + "device: gpu\n", {"max_device_memory=15.3GiB"}).max_device_memory,
            std::round(15.3 * 1024 * 1024 * 1024));
  EXPECT_EQ(load_text(kMinimal + "max_device_memory: auto\n").max_device_memory, 0);
  for (const char* bad : {"lots", "8G", "-1GiB", "0", "0.1", "1e30GiB"})
    EXPECT_EQ(error_of(kMinimal + "device: gpu\nmax_device_memory: " + bad + "\n"),
              cfg_path() + ":6: 'max_device_memory' must be auto or a size like 8GiB, 15.3GiB, " +
                  "512MiB or 16GB, got '" + bad + "'");
  const TrainConfig cpu = load_text(kMinimal + "max_device_memory: 8GiB\n");
  ASSERT_EQ(cpu.warnings.size(), 1u);
  EXPECT_NE(cpu.warnings[0].find("max_device_memory applies to a device"), std::string::npos)
      << cpu.warnings[0];
  for (const std::string size : {"8GiB", "1536MiB", "15.3GiB", "16GB"}) {
    TrainConfig c = load_text(kMinimal + "device: gpu\nmax_device_memory: " + size + "\n");
    const TrainConfig back = load_text(train::to_yaml(c));
    EXPECT_EQ(back.max_device_memory, c.max_device_memory) << size;
  }
  EXPECT_EQ(train::format_memory_size(8.0 * 1024 * 1024 * 1024), "8GiB");
  EXPECT_EQ(train::format_memory_size(1536.0 * 1024 * 1024), "1536MiB");
  EXPECT_EQ(train::training_relevant_config(d),
            train::training_relevant_config(load_text(kMinimal, {"max_device_memory=8GiB"})));
}

// The data-parallel keys: read, overridden as `medtune train --ddp-timeout/--reduction` do it, named
// when wrong, and left out of a run's identity (a resume may change how ranks wait and sum).
TEST(TrainConfig, DataParallelKeys) {
  const TrainConfig d = load_text(kMinimal);
  EXPECT_EQ(d.ddp_timeout_s, 0);  // dist::timeout_s()'s default
  EXPECT_EQ(d.ddp_reduction, "auto");
  const TrainConfig c = load_text(kMinimal + "ddp_timeout: 600\nddp_reduction: ordered\n", {"ddp_reduction=allreduce"});
  EXPECT_EQ(c.ddp_timeout_s, 600);
  EXPECT_EQ(c.ddp_reduction, "allreduce");
  EXPECT_EQ(error_of(kMinimal + "ddp_timeout: 0\n"),
            cfg_path() + ":5: 'ddp_timeout' must be a number of seconds > 0, got '0'");
  EXPECT_EQ(error_of(kMinimal + "ddp_reduction: ring\n"),
            cfg_path() + ":5: 'ddp_reduction' must be one of auto, ordered, allreduce, got 'ring'");
  nlohmann::json a = train::training_relevant_config(d), b = train::training_relevant_config(c);
  EXPECT_FALSE(a.contains("ddp_timeout") || a.contains("ddp_reduction"));
  EXPECT_EQ(a, b);
}

TEST(TrainConfig, ScalarForms) {
  EXPECT_EQ(load_text(kMinimal + "max_runtime: 12h\n").max_runtime_s, 43200);
  EXPECT_EQ(load_text(kMinimal + "max_runtime: 3600s\n").max_runtime_s, 3600);
  EXPECT_EQ(load_text(kMinimal + "max_runtime: 1h30m\n").max_runtime_s, 5400);
  EXPECT_EQ(load_text(kMinimal + "max_runtime: 120\n").max_runtime_s, 120);
  const TrainConfig frac = load_text(kMinimal + "val_set_size: 0.05\n");
  EXPECT_EQ(frac.val_set_fraction, 0.05);
  EXPECT_EQ(frac.val_set_count, 0);
  EXPECT_EQ(load_text(kMinimal + "val_set_size: 100\n").val_set_count, 100);
  EXPECT_EQ(load_text(kMinimal + "lora_target_modules: all-linear\n").lora_target_modules.size(),
            7u);
  // Canonical order, no repeats.
  EXPECT_EQ(
      load_text(kMinimal + "lora_target_modules: [v_proj, q_proj, v_proj]\n").lora_target_modules,
      (std::vector<model::Proj>{model::Proj::q, model::Proj::v}));
  EXPECT_EQ(load_text(kMinimal + "sample_packing: yes\n").sample_packing, true);
  EXPECT_EQ(load_text(kMinimal + "auto_resume_from_checkpoints: true\n").resume_from_checkpoint,
            "auto");
}

TEST(TrainConfig, FileErrors) {
  EXPECT_EQ(error_of("base_model: [unclosed\n").rfind(cfg_path() + ":2:", 0), 0u);
  EXPECT_NE(error_of("base_model: [unclosed\n").find("YAML syntax error"), std::string::npos);
  EXPECT_EQ(error_of("- a\n- b\n"), cfg_path() + ":1: a config must be a mapping of key: value");
  try {
    train::load_train_config((scratch() / "absent.yaml").string(), {});
    ADD_FAILURE() << "no error for a missing file";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "config " + (scratch() / "absent.yaml").string() + ": no such file");
  }
  // A directory opens as a stream on Linux and reads as empty: it used to be reported as
  // "missing required key 'base_model'".
  try {
    train::load_train_config(scratch().string(), {});
    ADD_FAILURE() << "no error for a directory";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()), "config " + scratch().string() + ": is a directory, expected a file");
  }
}

// Inputs that fuzz/fuzz_train_config found escaping as another exception or crashing; each is now
// a BadInput naming the file, the line and the key.
TEST(TrainConfig, FuzzerFindsAreBadInput) {
  // A list or a mapping as a key: yaml-cpp's as<std::string> threw its own bad-conversion error.
  EXPECT_EQ(error_of("{base_model: m.gguf, [a, b]: 1}\n"),
            cfg_path() + ":1: a key of the config must be a name, got a list");
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - path: t.jsonl\n    ? {x: 1}\n    : 2\n"),
            cfg_path() + ":4: a key of datasets[0] must be a name, got a mapping");
  // Not UTF-8 (raw bytes; yaml-cpp's escapes always give UTF-8): it loaded, then writing the
  // resolved config as JSON threw nlohmann's type_error.316 ("internal error" from medtune train).
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - path: data/medqa_\x9c"
                     "ev.jsonl\n    type: medqa\n"),
            cfg_path() + ":3: 'datasets[0].path' is not valid UTF-8 (byte 12 of the value)");
  EXPECT_EQ(error_of(kMinimal + "system_prompt: \"ok \xed\xa0\x80\"\n"),  // a surrogate
            cfg_path() + ":5: 'system_prompt' is not valid UTF-8 (byte 4 of the value)");
  EXPECT_EQ(error_of(kMinimal, {"output_dir=runs/\xc0\xaf"}),
            "command line: 'output_dir' is not valid UTF-8 (byte 6 of the value)");
  EXPECT_EQ(load_text(kMinimal + "system_prompt: \"Réponds: \\u00e9 \\U0001F600\"\n").system_prompt,
            "Réponds: é \xF0\x9F\x98\x80");
  // A 100,000-digit number or duration overflowed the stack inside std::regex (found by probing
  // past the fuzzer's 4 KB inputs); a long plain system_prompt did the same in to_yaml.
  const std::string digits(100000, '1');
  EXPECT_EQ(error_of(kMinimal + "lora_r: " + digits + "\n").rfind(
                cfg_path() + ":5: 'lora_r' must be a positive integer, got '111", 0),
            0u);
  EXPECT_EQ(error_of(kMinimal + "learning_rate: " + digits + "\n").rfind(
                cfg_path() + ":5: 'learning_rate' must be a number > 0, got '111", 0),
            0u);
  EXPECT_EQ(error_of(kMinimal + "val_set_size: " + digits + "\n").rfind(
                cfg_path() + ":5: 'val_set_size' must be a fraction", 0),
            0u);
  EXPECT_EQ(error_of(kMinimal + "max_runtime: " + digits + "s\n").rfind(
                cfg_path() + ":5: 'max_runtime' must be a duration", 0),
            0u);
  EXPECT_FALSE(train::parse_duration_s(digits + "s").has_value());
  TrainConfig c = load_text(kMinimal + "system_prompt: " + std::string(100000, 'a') + "\n");
  c.warnings.clear();
  TrainConfig back = load_text(train::to_yaml(c));
  back.warnings.clear();
  EXPECT_EQ(back, c);
}

// A config exercising every kind of value, for the round trips.
const std::string kEverything =
    "base_model: /models/llama\n"
    "adapter: qlora\n"
    "datasets: [{path: a.jsonl, type: medqa}, {path: b.jsonl, type: chat}]\n"
    "val_set_size: 250\n"
    "lora_r: 12\nlora_alpha: 24.5\nlora_dropout: 0.1\nlora_target_modules: [gate_proj, k_proj]\n"
    "peft_use_rslora: true\nsequence_len: 1024\nsample_packing: true\ntrain_on_inputs: true\n"
    "prompt_format: chat\nsystem_prompt: \"Say: \\\"A\\\" or \\\"B\\\"\\n# not a comment\"\n"
    "micro_batch_size: 3\ngradient_accumulation_steps: 5\nnum_epochs: 2.5\nlearning_rate: 3.3e-5\n"
    "lr_scheduler: constant_with_warmup\nwarmup_ratio: 0.07\nweight_decay: 0.01\nadam_beta1: 0.85\n"
    "adam_beta2: 0.95\nadam_epsilon: 1e-6\nmax_grad_norm: 0.3\ngradient_checkpointing: true\nseed: "
    "7\n"
    "output_dir: out/run 1\nsave_steps: 100\nsave_total_limit: 0\neval_steps: 25\nlogging_steps: "
    "5\n"
    "num_threads: 2\nmax_runtime: 2h\nresume_from_checkpoint: auto\n"
    "ddp_timeout: 90.5\nddp_reduction: allreduce\n";

TEST(TrainConfig, YamlRoundTrip) {
  std::vector<TrainConfig> configs = {
      load_text(kMinimal), load_text(kEverything),
      load_text(kMinimal + "val_set_size: 0.1\nwarmup_steps: 3\neval_steps: 2\n")};
  for (const fs::path& p : example_configs())
    configs.push_back(train::load_train_config(p.string(), {}));
  for (TrainConfig& c : configs) {
    c.warnings.clear();  // warnings are not settings: to_yaml leaves them out
    const std::string yaml = train::to_yaml(c);
    SCOPED_TRACE(yaml);
    TrainConfig back = train::load_train_config(write_config("round.yaml", yaml), {});
    back.warnings.clear();  // the same settings give the same warnings ("eval set unused" ...)
    EXPECT_EQ(back, c);
    EXPECT_EQ(train::to_yaml(back), yaml);
  }
}

TEST(TrainConfig, JsonRoundTrip) {
  const TrainConfig c = load_text(kEverything);
  const nlohmann::json j = train::to_json(c);
  EXPECT_EQ(j["lora_r"], 12);
  EXPECT_EQ(j["adapter"], "qlora");
  EXPECT_EQ(j["base_quant"], "nf4");
  EXPECT_EQ(j["lora_target_modules"], nlohmann::json({"k_proj", "gate_proj"}));
  EXPECT_EQ(j["val_set_size"], 250);
  EXPECT_EQ(j["max_runtime"], "7200s");
  EXPECT_FALSE(j.contains("warnings"));
  // JSON is YAML: the resolved config written to a run directory loads back as a config.
  const TrainConfig back = train::load_train_config(write_config("round.json", j.dump(2)), {});
  EXPECT_EQ(back, c);
  EXPECT_EQ(train::to_json(back), j);
}

TEST(TrainConfig, PartsForOtherComponents) {
  const TrainConfig c = load_text(kEverything);
  const model::LoraConfig l = train::lora_config(c);
  EXPECT_EQ(l.r, 12);
  EXPECT_EQ(l.alpha, 24.5);
  EXPECT_TRUE(l.use_rslora);
  EXPECT_EQ(l.targets, c.lora_target_modules);
  const train::AdamWConfig a = train::adamw_config(c);
  EXPECT_EQ(a.lr, 3.3e-5);
  EXPECT_EQ(a.beta1, 0.85);
  EXPECT_EQ(a.eps, 1e-6);
  EXPECT_EQ(a.weight_decay, 0.01);
  EXPECT_NO_THROW(train::validate(a));
}

// report_to and logging_dir as transformers names them: one name or a list, "none" off, any other
// tracker refused at its line rather than silently not reported to.
TEST(TrainConfig, ReportToTensorBoard) {
  EXPECT_FALSE(load_text(kMinimal).report_to_tensorboard);
  EXPECT_TRUE(load_text(kMinimal + "report_to: tensorboard\n").report_to_tensorboard);
  EXPECT_TRUE(load_text(kMinimal + "report_to: [none, tensorboard]\n").report_to_tensorboard);
  EXPECT_FALSE(load_text(kMinimal + "report_to: none\n").report_to_tensorboard);
  EXPECT_TRUE(load_text(kMinimal, {"report_to=[tensorboard]"}).report_to_tensorboard);

  const TrainConfig defaults = load_text(kMinimal + "output_dir: out/r\n");
  EXPECT_EQ(defaults.logging_dir, "");
  EXPECT_EQ(train::logging_dir_of(defaults), (fs::current_path() / "out/r/runs").string());
  const TrainConfig set = load_text(kMinimal + "report_to: tensorboard\nlogging_dir: tb/run 1\n");
  EXPECT_EQ(train::logging_dir_of(set), (fs::current_path() / "tb/run 1").string());
  const TrainConfig back = load_text(train::to_yaml(set));
  EXPECT_EQ(back, set);
  EXPECT_EQ(train::to_json(set)["report_to"], "tensorboard");

  EXPECT_EQ(error_of(kMinimal + "report_to: wandb\n"),
            cfg_path() + ":5: 'report_to' value 'wandb' is not supported: medtune writes TensorBoard event files "
                         "(tensorboard) or nothing (none)");
  EXPECT_EQ(error_of(kMinimal + "report_to:\n  - tensorboard\n  - mlflow\n"),
            cfg_path() + ":7: 'report_to' value 'mlflow' is not supported: medtune writes TensorBoard event "
                         "files (tensorboard) or nothing (none)");
  EXPECT_EQ(error_of(kMinimal + "report_to: {a: 1}\n"),
            cfg_path() + ":5: 'report_to' must be a non-empty string, got a mapping");
}

}  // namespace
}  // namespace medtune

namespace medtune::train {
namespace {

// axolotl's per-dataset keys: read into the entry, checked against its type, and written back
// by to_yaml only where set (a medqa entry resolves as it did before they existed).
TEST(TrainConfig, AxolotlDatasetKeys) {
  const std::string text =
      "base_model: m.gguf\n"
      "skip_invalid: true\n"
      "datasets:\n"
      "  - path: a.jsonl\n"
      "    type: alpaca\n"
      "    field_instruction: q\n"
      "    field_output: a\n"
      "  - path: c.jsonl\n"
      "    type: chat_template\n"
      "    field_messages: conversations\n"
      "    message_property_mappings: {role: from, content: value}\n"
      "    roles_to_train: [human, gpt]\n"
      "    train_on_eos: all\n";
  const TrainConfig c = load_text(text);
  EXPECT_TRUE(c.skip_invalid);
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0].type, DatasetType::kAlpaca);
  EXPECT_EQ(c.datasets[0].field_instruction, "q");
  EXPECT_EQ(c.datasets[0].field_output, "a");
  EXPECT_EQ(c.datasets[1].message_field_role, "from");
  EXPECT_EQ(c.datasets[1].message_field_content, "value");
  EXPECT_EQ(c.datasets[1].roles_to_train, (std::vector<std::string>{"human", "gpt"}));
  EXPECT_EQ(c.datasets[1].train_on_eos, "all");
  TrainConfig back = load_text(to_yaml(c));
  EXPECT_EQ(back, c);
  // The older spelling of the mappings.
  EXPECT_EQ(load_text(kMinimal + "  - path: d.jsonl\n    type: chat_template\n    message_field_role: speaker\n")
                .datasets[1].message_field_role,
            "speaker");
  // A medqa entry's resolved form has only path and type.
  EXPECT_EQ(to_json(load_text(kMinimal))["datasets"][0].size(), 2u);
  // A key of another type, a bad train_on_eos.
  EXPECT_EQ(error_of(kMinimal + "    field_instruction: q\n"),
            cfg_path() + ":3: datasets[0].field_instruction is a key of type alpaca, not medqa");
  EXPECT_EQ(error_of("base_model: m.gguf\ndatasets:\n  - path: c.jsonl\n    type: chat_template\n"
                     "    train_on_eos: sometimes\n"),
            cfg_path() + ":5: 'datasets[0].train_on_eos' must be turn, all, last or none, got 'sometimes'");
}

}  // namespace
}  // namespace medtune::train
