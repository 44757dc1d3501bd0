// PEFT LoRA adapters: the committed adapters written by PEFT 0.21 (tests/fixtures/hf/*/adapter_init,
// tests/fixtures/peft/adapter_{bf16,f16}) read with the values safetensors/torch report
// (tests/fixtures/peft/adapter_values.json, tools/check_peft_roundtrip.py), write -> read round
// trips, files byte-equal to PEFT's, and broken adapters refused with messages naming the problem.
// The options that choose which modules PEFT adapts (layers_to_transform, layers_pattern,
// exclude_modules) are checked against PEFT's own rule on the cases in
// tests/fixtures/peft/layers_to_transform/rules.json (tools/make_peft_layers_fixture.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/hf_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace medtune::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kGqaAdapter = kFixtures + "hf/llama_gqa/adapter_init";
const std::string kWritten = kFixtures + "peft/medtune_written";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream ss;  // (istreambuf_iterator trips GCC 12's -Wnull-dereference here)
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

json values_fixture() { return json::parse(read_text(kFixtures + "peft/adapter_values.json")); }

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("medtune_peft_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Expected (out, in) of a LoRA'd module from the base config, as the HF Llama modules are built.
std::pair<int64_t, int64_t> linear_shape(const ModelConfig& c, const std::string& module) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const std::string leaf = module.substr(module.rfind('.') + 1);
  if (leaf == "q_proj") return {q, c.hidden_size};
  if (leaf == "k_proj" || leaf == "v_proj") return {kv, c.hidden_size};
  if (leaf == "o_proj") return {c.hidden_size, q};
  if (leaf == "gate_proj" || leaf == "up_proj") return {c.intermediate_size, c.hidden_size};
  if (leaf == "down_proj") return {c.hidden_size, c.intermediate_size};
  ADD_FAILURE() << "unexpected module " << module;
  return {0, 0};
}

// Checks every pair of `a` against the fixture's entry in adapter_values.json: shapes, the
// sampled values (exactly: they are torch's float32 values), and that no tensor is left over.
void expect_matches_values(const PeftAdapter& a, const json& v, const std::string& what) {
  EXPECT_EQ(a.spec.r, v.at("r").get<int64_t>()) << what;
  EXPECT_EQ(a.spec.alpha, v.at("lora_alpha").get<double>()) << what;
  const json& tensors = v.at("tensors");
  EXPECT_EQ(tensors.size(), 2 * a.pairs.size()) << what;
  for (const LoraTensorPair& p : a.pairs) {
    for (const bool is_a : {true, false}) {
      const std::string name = "base_model.model." + p.module + (is_a ? ".lora_A.weight" : ".lora_B.weight");
      ASSERT_TRUE(tensors.contains(name)) << what << ": " << name;
      const json& t = tensors.at(name);
      const std::vector<int64_t> shape = is_a ? std::vector<int64_t>{p.r, p.in} : std::vector<int64_t>{p.out, p.r};
      EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), shape) << what << ": " << name;
      const std::vector<float>& data = is_a ? p.A : p.B;
      for (const json& iv : t.at("values")) {
        const auto i = iv[0].get<size_t>();
        ASSERT_LT(i, data.size()) << name;
        EXPECT_EQ(data[i], static_cast<float>(iv[1].get<double>())) << what << ": " << name << "[" << i << "]";
      }
    }
  }
}

TEST(PeftAdapter, ReadsEveryCommittedPeftFixture) {
  const json values = values_fixture();
  int fixtures = 0;
  for (const auto& [name, v] : values.items()) {
    if (name.starts_with("adapter_")) continue;  // the bf16/f16 copies, tested below
    ++fixtures;
    const std::string dir = kFixtures + "hf/" + name + "/adapter_init";
    const PeftAdapter a = read_peft_adapter(dir);
    EXPECT_EQ(a.spec.r, 4) << name;
    EXPECT_EQ(a.spec.alpha, 8.0) << name;
    EXPECT_EQ(a.spec.dropout, 0.0) << name;
    EXPECT_FALSE(a.spec.use_rslora) << name;
    EXPECT_EQ(a.scaling(), 2.0) << name;
    EXPECT_EQ(a.spec.target_modules, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"}))
        << name;
    EXPECT_EQ(a.spec.base_model_name_or_path, "") << name;
    ASSERT_EQ(a.pairs.size(), 14u) << name;  // 7 targets x 2 layers

    const ModelConfig c = read_hf_config(kFixtures + "hf/" + name + "/base/config.json");
    std::set<std::string> modules;
    for (const LoraTensorPair& p : a.pairs) {
      modules.insert(p.module);
      const auto [out, in] = linear_shape(c, p.module);
      EXPECT_EQ(p.r, 4) << name << " " << p.module;
      EXPECT_EQ(p.in, in) << name << " " << p.module;
      EXPECT_EQ(p.out, out) << name << " " << p.module;
      EXPECT_EQ(p.A.size(), static_cast<size_t>(p.r * p.in));
      EXPECT_EQ(p.B.size(), static_cast<size_t>(p.out * p.r));
    }
    std::set<std::string> expected;
    for (int l = 0; l < 2; ++l) {
      const std::string layer = "model.layers." + std::to_string(l) + ".";
      for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                            "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
        expected.insert(layer + m);
    }
    EXPECT_EQ(modules, expected) << name;
    expect_matches_values(a, v, name);
  }
  EXPECT_GE(fixtures, 8);
}

TEST(PeftAdapter, WidensBf16AndF16AsTorchDoes) {
  const json values = values_fixture();
  for (const char* name : {"adapter_bf16", "adapter_f16"}) {
    const PeftAdapter a = read_peft_adapter(kFixtures + "peft/" + name);
    ASSERT_EQ(a.pairs.size(), 14u) << name;
    expect_matches_values(a, values.at(name), name);
    const auto file = read_safetensors(kFixtures + "peft/" + name + "/adapter_model.safetensors");
    const RawTensor& t = file.tensors.begin()->second;
    EXPECT_EQ(t.dtype, std::string(name) == "adapter_bf16" ? DType::BF16 : DType::F16);
  }
}

TEST(PeftAdapter, ScalingWithRsLora) {
  PeftAdapter a;
  a.spec.r = 16;
  a.spec.alpha = 8.0;
  EXPECT_EQ(a.scaling(), 0.5);
  a.spec.use_rslora = true;
  EXPECT_EQ(a.scaling(), 2.0);  // 8 / sqrt(16)
}

void expect_same(const PeftAdapter& x, const PeftAdapter& y) {
  EXPECT_EQ(x.spec.r, y.spec.r);
  EXPECT_EQ(x.spec.alpha, y.spec.alpha);
  EXPECT_EQ(x.spec.dropout, y.spec.dropout);
  EXPECT_EQ(x.spec.use_rslora, y.spec.use_rslora);
  EXPECT_EQ(x.spec.target_modules, y.spec.target_modules);
  EXPECT_EQ(x.spec.base_model_name_or_path, y.spec.base_model_name_or_path);
  ASSERT_EQ(x.pairs.size(), y.pairs.size());
  for (size_t i = 0; i < x.pairs.size(); ++i) {
    const LoraTensorPair &p = x.pairs[i], &q = y.pairs[i];
    EXPECT_EQ(p.module, q.module);
    EXPECT_EQ(p.r, q.r);
    EXPECT_EQ(p.in, q.in);
    EXPECT_EQ(p.out, q.out);
    EXPECT_EQ(p.A, q.A) << p.module;  // bit-exact: F32 is stored as is
    EXPECT_EQ(p.B, q.B) << p.module;
  }
}

TEST(PeftAdapter, WriteThenReadIsExact) {
  TempDir dir;
  PeftAdapter a = read_peft_adapter(kFixtures + "hf/llama_mha_odd/adapter_init");
  a.spec.alpha = 12.5;  // non-integral alpha is written as a float
  a.spec.dropout = 0.05;
  a.spec.use_rslora = true;
  a.spec.base_model_name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct";
  const std::string out = dir / "nested/adapter";  // created on demand
  write_peft_adapter(out, a, {{"medtune_step", "120"}});
  expect_same(read_peft_adapter(out), a);
  const SafetensorsFile f = read_safetensors(out + "/adapter_model.safetensors");
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"medtune_step", "120"}}));
  const json cfg = json::parse(read_text(out + "/adapter_config.json"));
  EXPECT_EQ(cfg.at("lora_alpha").dump(), "12.5");
  EXPECT_EQ(cfg.at("lora_dropout").dump(), "0.05");
  EXPECT_EQ(cfg.at("base_model_name_or_path"), "HuggingFaceTB/SmolLM2-135M-Instruct");
  EXPECT_TRUE(cfg.at("use_rslora").get<bool>());
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

// What we write for llama_gqa's adapter is what PEFT wrote: the tensor file byte for byte, and the
// config text except init_lora_weights (we always write PEFT's default, true; see peft_adapter.cpp).
// The same output is committed as tests/fixtures/peft/medtune_written, which
// tools/check_peft_roundtrip.py loads with PeftModel.from_pretrained; this test keeps that copy in
// step with the code (MEDTUNE_UPDATE_PEFT_FIXTURE=1 rewrites it).
TEST(PeftAdapter, WritesWhatPeftWrites) {
  TempDir dir;
  const PeftAdapter a = read_peft_adapter(kGqaAdapter);
  write_peft_adapter(dir.str(), a, {});
  const std::string st = read_text(dir / "adapter_model.safetensors");
  const std::string cfg = read_text(dir / "adapter_config.json");
  EXPECT_TRUE(st == read_text(kGqaAdapter + "/adapter_model.safetensors"));

  std::string peft_cfg = read_text(kGqaAdapter + "/adapter_config.json");
  const std::string from = "\"init_lora_weights\": false", to = "\"init_lora_weights\": true";
  ASSERT_NE(peft_cfg.find(from), std::string::npos);
  peft_cfg.replace(peft_cfg.find(from), from.size(), to);
  EXPECT_EQ(cfg, peft_cfg);

  if (const char* update = std::getenv("MEDTUNE_UPDATE_PEFT_FIXTURE"); update && *update == '1')
    write_peft_adapter(kWritten, a, {});
  EXPECT_TRUE(st == read_text(kWritten + "/adapter_model.safetensors"))
      << kWritten << " is stale: rerun with MEDTUNE_UPDATE_PEFT_FIXTURE=1, then tools/check_peft_roundtrip.py";
  EXPECT_EQ(cfg, read_text(kWritten + "/adapter_config.json"));
}

// ---- broken adapters --------------------------------------------------------------------------

// A copy of llama_gqa's adapter in a temporary directory, with its config or tensors edited.
class BrokenAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(kGqaAdapter, dir_.str(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    config_ = json::parse(read_text(dir_ / "adapter_config.json"));
  }
  void set(const std::string& key, const json& value) {
    config_[key] = value;
    write_text(dir_ / "adapter_config.json", config_.dump(2));
  }
  // Rewrites the tensor file through `edit`, which may drop, add or change entries.
  void edit_tensors(const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    const SafetensorsFile f = read_safetensors(dir_ / "adapter_model.safetensors");
    std::vector<TensorToWrite> ts;
    for (const auto& [name, r] : f.tensors) ts.push_back({name, r.dtype, r.shape, r.data});
    edit(ts);
    const std::vector<uint8_t> bytes = serialize_safetensors(ts, f.metadata);
    write_text(dir_ / "adapter_model.safetensors", std::string(bytes.begin(), bytes.end()));
  }
  // Expects BadInput whose message holds `file` (relative to the adapter dir) and every needle.
  void expect_bad(const std::string& file, std::initializer_list<std::string> needles) {
    try {
      read_peft_adapter(dir_.str());
      ADD_FAILURE() << "no exception";
    } catch (const BadInput& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir_ / file), std::string::npos) << msg;
      for (const auto& n : needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
  }

  TempDir dir_;
  json config_;
  const std::string a0_ = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  const std::string b0_ = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
};

TEST_F(BrokenAdapter, UneditedCopyReads) { EXPECT_EQ(read_peft_adapter(dir_.str()).pairs.size(), 14u); }

TEST_F(BrokenAdapter, MissingDirectory) {
  EXPECT_THROW(read_peft_adapter(dir_ / "nope"), BadInput);
}

TEST_F(BrokenAdapter, MissingConfig) {
  fs::remove(dir_ / "adapter_config.json");
  expect_bad("adapter_config.json", {"missing"});
}

TEST_F(BrokenAdapter, ConfigNotJson) {
  write_text(dir_ / "adapter_config.json", "{\"r\": 4,");
  expect_bad("adapter_config.json", {"not valid JSON"});
}

TEST_F(BrokenAdapter, PickleOnly) {
  fs::rename(dir_ / "adapter_model.safetensors", dir_ / "adapter_model.bin");
  expect_bad("adapter_model.bin", {"only safetensors adapters are supported", "convert"});
}

TEST_F(BrokenAdapter, MissingWeights) {
  fs::remove(dir_ / "adapter_model.safetensors");
  expect_bad("adapter_model.safetensors", {"missing"});
}

TEST_F(BrokenAdapter, WrongPeftType) {
  set("peft_type", "IA3");
  expect_bad("adapter_config.json", {"'peft_type'", "IA3", "LORA"});
}

TEST_F(BrokenAdapter, ConfigRankDiffersFromTensors) {
  set("r", 8);
  expect_bad("adapter_model.safetensors", {"rank 4", "r = 8", "adapter_config.json"});
}

TEST_F(BrokenAdapter, NonPositiveRank) {
  set("r", 0);
  expect_bad("adapter_config.json", {"'r'", "positive integer"});
}

TEST_F(BrokenAdapter, MissingLoraB) {
  edit_tensors([&](auto& ts) { std::erase_if(ts, [&](const TensorToWrite& t) { return t.name == b0_; }); });
  expect_bad("adapter_model.safetensors", {a0_, "no matching", b0_});
}

TEST_F(BrokenAdapter, MissingLoraA) {
  edit_tensors([&](auto& ts) { std::erase_if(ts, [&](const TensorToWrite& t) { return t.name == a0_; }); });
  expect_bad("adapter_model.safetensors", {b0_, "no matching", a0_});
}

TEST_F(BrokenAdapter, LoraAAndBDisagreeOnRank) {
  std::vector<float> b(64 * 3, 0.5f);  // (out 32, r 3) instead of (32, 4)... stored as (64, 3)
  edit_tensors([&](auto& ts) {
    for (auto& t : ts)
      if (t.name == b0_) t = {b0_, DType::F32, {64, 3}, b.data()};
  });
  expect_bad("adapter_model.safetensors", {"self_attn.q_proj", "disagree on the rank"});
}

TEST_F(BrokenAdapter, Dora) {
  set("use_dora", true);
  expect_bad("adapter_config.json", {"'use_dora'", "DoRA"});
}

TEST_F(BrokenAdapter, RankPattern) {
  set("rank_pattern", {{"q_proj", 8}});
  expect_bad("adapter_config.json", {"'rank_pattern'", "not supported yet"});
}

TEST_F(BrokenAdapter, AlphaPattern) {
  set("alpha_pattern", {{"q_proj", 16}});
  expect_bad("adapter_config.json", {"'alpha_pattern'", "not supported yet"});
}

TEST_F(BrokenAdapter, Bias) {
  set("bias", "lora_only");
  expect_bad("adapter_config.json", {"'bias'", "lora_only"});
}

TEST_F(BrokenAdapter, FanInFanOut) {
  set("fan_in_fan_out", true);
  expect_bad("adapter_config.json", {"'fan_in_fan_out'"});
}

TEST_F(BrokenAdapter, ModulesToSave) {
  set("modules_to_save", json::array({"lm_head"}));
  expect_bad("adapter_config.json", {"'modules_to_save'", "lm_head"});
}

TEST_F(BrokenAdapter, LoraBias) {
  set("lora_bias", true);
  expect_bad("adapter_config.json", {"'lora_bias'", "not supported"});
}

TEST_F(BrokenAdapter, InitThatRewritesBaseWeights) {
  set("init_lora_weights", "pissa");
  expect_bad("adapter_config.json", {"'init_lora_weights'", "pissa"});
}

TEST_F(BrokenAdapter, TargetModulesRegex) {
  set("target_modules", ".*\\.(q|v)_proj");
  expect_bad("adapter_config.json", {"'target_modules'", "regex"});
}

TEST_F(BrokenAdapter, UnknownTensor) {
  const float v[4] = {};
  edit_tensors([&](auto& ts) { ts.push_back({"base_model.model.lm_head.weight", DType::F32, {2, 2}, v}); });
  expect_bad("adapter_model.safetensors", {"'base_model.model.lm_head.weight'", "not a LoRA weight"});
}

TEST_F(BrokenAdapter, TensorForAnUntargetedModule) {
  set("target_modules", json::array({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}));
  expect_bad("adapter_model.safetensors", {"mlp.down_proj", "target_modules"});
}

TEST_F(BrokenAdapter, IntegerTensor) {
  std::vector<int32_t> v(4 * 32, 1);
  edit_tensors([&](auto& ts) {
    for (auto& t : ts)
      if (t.name == a0_) t = {a0_, DType::I32, {4, 32}, v.data()};
  });
  expect_bad("adapter_model.safetensors", {a0_, "I32"});
}

TEST_F(BrokenAdapter, ThreeDimensionalTensor) {
  std::vector<float> v(4 * 32, 1.0f);
  edit_tensors([&](auto& ts) {
    for (auto& t : ts)
      if (t.name == a0_) t = {a0_, DType::F32, {4, 32, 1}, v.data()};
  });
  expect_bad("adapter_model.safetensors", {a0_, "2 dimensions"});
}

// ---- config options that choose the adapted modules (layers_to_transform, layers_pattern,
// exclude_modules) and the other options that change the model (task_type, lora_alpha) ---------

// The llama_gqa adapter (2 layers x 7 projections) with some tensors removed, so that its file
// agrees with a narrower config.
class NarrowedAdapter : public BrokenAdapter {
 protected:
  // Removes every tensor whose name contains `part` (e.g. "layers.1.", "mlp.down_proj").
  void drop(const std::string& part) {
    edit_tensors([&](auto& ts) {
      std::erase_if(ts,
                    [&](const TensorToWrite& t) { return t.name.find(part) != std::string::npos; });
    });
  }
};

TEST_F(NarrowedAdapter, LayersToTransformReadsTheListedLayers) {
  set("layers_to_transform", json::array({0}));
  drop("layers.1.");
  const PeftAdapter a = read_peft_adapter(dir_.str());
  EXPECT_EQ(a.spec.layers_to_transform, (std::vector<int64_t>{0}));
  EXPECT_TRUE(a.spec.layers_pattern.empty());
  ASSERT_EQ(a.pairs.size(), 7u);
  for (const LoraTensorPair& p : a.pairs)
    EXPECT_TRUE(p.module.starts_with("model.layers.0.")) << p.module;
  // PEFT's single-integer form means the same.
  set("layers_to_transform", 0);
  EXPECT_EQ(read_peft_adapter(dir_.str()).spec.layers_to_transform, (std::vector<int64_t>{0}));
}

TEST_F(NarrowedAdapter, LayersToTransformEmptyListMeansEveryLayer) {
  set("layers_to_transform", json::array());
  const PeftAdapter a = read_peft_adapter(dir_.str());
  EXPECT_TRUE(a.spec.layers_to_transform.empty());
  EXPECT_EQ(a.pairs.size(), 14u);
}

// PEFT would create no LoRA layer in layer 1 and drop those tensors without a word.
TEST_F(BrokenAdapter, TensorInALayerThatLayersToTransformLeavesOut) {
  set("layers_to_transform", json::array({0}));
  expect_bad("adapter_model.safetensors", {"'base_model.model.model.layers.1.", "in layer 1",
                                           "layers_to_transform [0]", "adapter_config.json"});
}

TEST_F(BrokenAdapter, TensorInALayerThatIntegerLayersToTransformLeavesOut) {
  set("layers_to_transform", 1);
  expect_bad("adapter_model.safetensors",
             {"'base_model.model.model.layers.0.", "in layer 0", "layers_to_transform [1]"});
}

// A targeted module whose name holds no "<name>.<number>." has no layer index: with
// layers_to_transform set PEFT does not adapt it.
TEST_F(BrokenAdapter, TensorWithoutALayerIndexUnderLayersToTransform) {
  set("layers_to_transform", json::array({0, 1}));
  std::vector<float> a(4 * 32, 0.5f), b(32 * 4, 0.5f);
  edit_tensors([&](auto& ts) {
    ts.push_back({"base_model.model.model.q_proj.lora_A.weight", DType::F32, {4, 32}, a.data()});
    ts.push_back({"base_model.model.model.q_proj.lora_B.weight", DType::F32, {32, 4}, b.data()});
  });
  expect_bad("adapter_model.safetensors",
             {"'base_model.model.model.q_proj.lora_", "default layers pattern finds no layer index",
              "layers_to_transform [0, 1]"});
}

TEST_F(BrokenAdapter, LayersToTransformThatIsNotALayerIndex) {
  for (const json& v : {json(-1), json(1.5), json("1"), json(true), json::array({0, -2}),
                        json::array({"0"}), json::object({{"0", 1}})}) {
    SCOPED_TRACE(v.dump());
    set("layers_to_transform", v);
    expect_bad("adapter_config.json",
               {"'layers_to_transform'", "layer index", v.is_array() ? "" : v.dump()});
  }
}

TEST_F(NarrowedAdapter, LayersPatternLayersIsWhatLlamaModelsUse) {
  set("layers_to_transform", json::array({1}));
  for (const json& pattern : {json("layers"), json::array({"layers"}), json::array({"h", "layers"}),
                              json(""), json::array()}) {
    SCOPED_TRACE(pattern.dump());
    set("layers_pattern", pattern);
    // The file still holds layer 0's tensors, which PEFT would not load under any of these.
    expect_bad("adapter_model.safetensors", {"in layer 0", "layers_to_transform [1]"});
  }
  drop("layers.0.");
  set("layers_pattern", json::array({"h", "layers"}));
  const PeftAdapter a = read_peft_adapter(dir_.str());
  EXPECT_EQ(a.spec.layers_pattern, (std::vector<std::string>{"h", "layers"}));
  EXPECT_EQ(a.pairs.size(), 7u);
  set("layers_pattern", "layers");
  EXPECT_EQ(read_peft_adapter(dir_.str()).spec.layers_pattern,
            (std::vector<std::string>{"layers"}));
}

// With another pattern PEFT finds no layer index in "model.layers.N...." and adapts nothing.
TEST_F(BrokenAdapter, LayersPatternThatDoesNotMatchLlamaModuleNames) {
  set("layers_to_transform", json::array({0, 1}));
  for (const json& pattern : {json("h"), json("blocks"), json::array({"h", "layer"})}) {
    SCOPED_TRACE(pattern.dump());
    set("layers_pattern", pattern);
    expect_bad("adapter_config.json", {"'layers_pattern'", pattern.dump(), "model.layers.N"});
  }
  for (const json& pattern :
       {json("lay.rs"), json("(layers|h)"), json::array({"layers", "model\\.layers"}),
        json::array({"layers", 3})}) {
    SCOPED_TRACE(pattern.dump());
    set("layers_pattern", pattern);
    expect_bad("adapter_config.json", {"'layers_pattern'", "plain names"});
  }
  set("layers_pattern", 7);
  expect_bad("adapter_config.json", {"'layers_pattern'", "string or a list of strings"});
}

// PEFT's LoraConfig raises when layers_to_transform is null; with [] it ignores both.
TEST_F(BrokenAdapter, LayersPatternWithoutLayersToTransform) {
  set("layers_pattern", "layers");
  expect_bad("adapter_config.json", {"'layers_pattern'", "layers_to_transform is not set"});
  set("layers_to_transform", json::array());
  EXPECT_EQ(read_peft_adapter(dir_.str()).pairs.size(), 14u);
}

TEST_F(NarrowedAdapter, ExcludeModulesByNameOrFullPath) {
  set("exclude_modules", json::array({"down_proj", "model.layers.1.self_attn.q_proj"}));
  drop("mlp.down_proj");
  drop("layers.1.self_attn.q_proj");
  const PeftAdapter a = read_peft_adapter(dir_.str());
  EXPECT_EQ(a.spec.exclude_modules,
            (std::vector<std::string>{"down_proj", "model.layers.1.self_attn.q_proj"}));
  EXPECT_EQ(a.pairs.size(), 11u);
  for (const json& off : {json(nullptr), json(""), json::array()}) {
    set("exclude_modules", off);
    EXPECT_TRUE(read_peft_adapter(dir_.str()).spec.exclude_modules.empty()) << off.dump();
  }
}

TEST_F(BrokenAdapter, TensorForAnExcludedModule) {
  set("exclude_modules", json::array({"down_proj"}));
  expect_bad("adapter_model.safetensors",
             {"mlp.down_proj.lora_", "exclude_modules [down_proj]", "adapter_config.json"});
  // A dotted suffix of the full name counts; a suffix that is not a whole name component does not.
  set("exclude_modules", json::array({"1.self_attn.q_proj"}));
  expect_bad("adapter_model.safetensors",
             {"'base_model.model.model.layers.1.self_attn.q_proj.lora_", "exclude_modules"});
  set("exclude_modules", json::array({"proj", "_proj", "layers.1.self_attn"}));
  EXPECT_EQ(read_peft_adapter(dir_.str()).pairs.size(), 14u);
}

TEST_F(BrokenAdapter, ExcludeModulesRegex) {
  set("exclude_modules", ".*\\.down_proj");
  expect_bad("adapter_config.json", {"'exclude_modules'", "regex"});
  set("exclude_modules", json::array({"down_proj", ""}));
  expect_bad("adapter_config.json", {"'exclude_modules'", "non-empty strings"});
  set("exclude_modules", 3);
  expect_bad("adapter_config.json", {"'exclude_modules'", "list of module names"});
}

TEST_F(BrokenAdapter, TaskTypeOtherThanCausalLm) {
  for (const char* task :
       {"SEQ_CLS", "TOKEN_CLS", "SEQ_2_SEQ_LM", "FEATURE_EXTRACTION", "causal_lm"}) {
    set("task_type", task);
    expect_bad("adapter_config.json", {"'task_type'", task, "CAUSAL_LM"});
  }
  set("task_type", 1);
  expect_bad("adapter_config.json", {"'task_type'"});
  for (const json& ok : {json("CAUSAL_LM"), json(nullptr)}) {
    set("task_type", ok);
    EXPECT_EQ(read_peft_adapter(dir_.str()).pairs.size(), 14u) << ok.dump();
  }
  config_.erase("task_type");
  write_text(dir_ / "adapter_config.json", config_.dump(2));
  EXPECT_EQ(read_peft_adapter(dir_.str()).pairs.size(), 14u);
}

TEST_F(BrokenAdapter, LoraAlphaNotPositive) {
  for (const json& alpha : {json(-8), json(0), json(-0.5), json(0.0)}) {
    set("lora_alpha", alpha);
    expect_bad("adapter_config.json", {"'lora_alpha'", alpha.dump(), "positive number"});
  }
  set("lora_alpha", 0.5);
  EXPECT_EQ(read_peft_adapter(dir_.str()).spec.alpha, 0.5);
}

// The matching rule itself, on names no committed adapter has. The same rule against PEFT's own
// check_target_module_exists, case by case: PeftRules.MatchPeftsCheckTargetModuleExists below.
TEST(PeftAdaptsModule, FollowsPeftsRule) {
  LoraSpec s;
  s.target_modules = {"q_proj", "model.layers.1.self_attn.v_proj"};
  EXPECT_TRUE(peft_adapts_module(s, "model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(peft_adapts_module(s, "model.layers.1.self_attn.k_proj"));
  EXPECT_FALSE(peft_adapts_module(s, "model.layers.1.self_attn.xq_proj"));  // whole components only
  s.layers_to_transform = {0};
  EXPECT_TRUE(peft_adapts_module(s, "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(peft_adapts_module(s, "model.layers.1.self_attn.q_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "model.layers.00.self_attn.q_proj"));  // int("00") == 0
  // PEFT applies layers_to_transform to suffix matches only: a full name in target_modules wins.
  EXPECT_TRUE(peft_adapts_module(s, "model.layers.1.self_attn.v_proj"));
  EXPECT_FALSE(peft_adapts_module(s, "model.layers.0.self_attn.v_proj"));
  // No "<name>.<number>." in the name: no layer index, not adapted.
  EXPECT_FALSE(peft_adapts_module(s, "model.q_proj"));
  EXPECT_FALSE(peft_adapts_module(s, "model.0.q_proj"));  // the number needs a name before it
  // The default pattern takes the first ".<any>.<number>." (PEFT 0.21's lazy ".*?": the layer of
  // "layers.3.experts.2", not the expert).
  s.layers_to_transform = {3};
  EXPECT_FALSE(peft_adapts_module(s, "x.blocks.2.layers.3.q_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "x.layers.3.experts.2.q_proj"));
  // The default pattern needs a '.' before the name component.
  EXPECT_FALSE(peft_adapts_module(s, "layers.3.q_proj"));
  // A pattern list is tried in order: the first pattern that finds an index decides. An explicit
  // pattern may also start the name.
  s.layers_pattern = {"blocks", "layers"};
  EXPECT_FALSE(peft_adapts_module(s, "x.blocks.2.layers.3.q_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "x.layers.2.blocks.3.q_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "x.layers.3.q_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "layers.3.q_proj"));
  // exclude_modules comes first, even before a full name in target_modules.
  s.layers_pattern.clear();
  s.layers_to_transform.clear();
  s.exclude_modules = {"self_attn.v_proj"};
  EXPECT_FALSE(peft_adapts_module(s, "model.layers.1.self_attn.v_proj"));
  EXPECT_TRUE(peft_adapts_module(s, "model.layers.1.self_attn.q_proj"));
}

// tests/fixtures/peft/layers_to_transform/rules.json (tools/make_peft_layers_fixture.py): for
// each config PEFT accepted (LoraConfig.save_pretrained, then from_pretrained), what
// peft.tuners.tuners_utils.check_target_module_exists says about each module name (a 3-layer
// Llama's and made-up ones). medtune must read each config and agree on every name, except for
// the configs marked medtune_refuses, which it must refuse: under those PEFT adapts none of the
// model's modules (the generator asserts it).
TEST(PeftRules, MatchPeftsCheckTargetModuleExists) {
  const json rules = json::parse(read_text(kFixtures + "peft/layers_to_transform/rules.json"));
  TempDir dir;
  int checked = 0, refused = 0;
  for (const json& c : rules.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    write_text(dir / "adapter_config.json", c.at("adapter_config").dump(2));
    if (c.at("medtune_refuses").get<bool>()) {
      EXPECT_THROW(read_peft_adapter_config(dir / "adapter_config.json"), BadInput) << name;
      ++refused;
      continue;
    }
    const LoraSpec s = read_peft_adapter_config(dir / "adapter_config.json");
    for (const auto& [module, adapted] : c.at("adapted").items()) {
      EXPECT_EQ(peft_adapts_module(s, module), adapted.get<bool>()) << name << ": " << module;
      ++checked;
    }
  }
  EXPECT_GE(checked, 300);
  EXPECT_EQ(refused, 3);
}

TEST(PeftAdapterWrite, RejectsInconsistentAdapters) {
  TempDir dir;
  PeftAdapter a = read_peft_adapter(kGqaAdapter);
  PeftAdapter bad_size = a;
  bad_size.pairs[0].A.pop_back();
  EXPECT_THROW(write_peft_adapter(dir.str(), bad_size, {}), Internal);
  PeftAdapter bad_rank = a;
  bad_rank.spec.r = 8;
  EXPECT_THROW(write_peft_adapter(dir.str(), bad_rank, {}), Internal);
  PeftAdapter dup = a;
  dup.pairs.push_back(dup.pairs[0]);
  EXPECT_THROW(write_peft_adapter(dir.str(), dup, {}), Internal);
  EXPECT_FALSE(fs::exists(dir / "adapter_model.safetensors"));
}

}  // namespace
}  // namespace medtune::io
