// open_checkpoint on tiny Hugging Face directories (tools/make_safetensors_fixtures.py), and its
// validation against expected_tensor_shapes with configs edited to disagree with the weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"

namespace medtune::io {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/safetensors/";

TEST(Checkpoint, OpensSingleFileDirectory) {
  Checkpoint ck = open_checkpoint(kDir + "tiny_llama");
  EXPECT_EQ(ck.format, "safetensors");
  EXPECT_EQ(ck.path, kDir + "tiny_llama");
  EXPECT_EQ(ck.config.architecture, "llama");
  EXPECT_EQ(ck.config.num_key_value_heads, 1);
  EXPECT_FALSE(ck.qk_rows_permuted);
  EXPECT_EQ(ck.gguf, nullptr);
  EXPECT_EQ(ck.tensors.size(), 21u);
  const RawTensor& q = ck.tensors.at("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{8, 8}));  // [NH*HD, C] = [2*4, 8]
  EXPECT_EQ(ck.tensors.at("model.layers.1.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{4, 8}));  // [NKV*HD, C]
  float v;
  std::memcpy(&v, q.data + 4 * 9, 4);
  EXPECT_EQ(v, 9 * 0.25f - 4.0f);
}

TEST(Checkpoint, OpensShardedDirectory) {
  Checkpoint ck = open_checkpoint(kDir + "tiny_llama_sharded");
  EXPECT_EQ(ck.tensors.size(), 21u);
  EXPECT_EQ(ck.tensors.at("lm_head.weight").dtype, DType::F16);
}

TEST(Checkpoint, TiedQwen2WithBiases) {
  Checkpoint ck = open_checkpoint(kDir + "tiny_qwen2_tied");
  EXPECT_TRUE(ck.config.tie_word_embeddings);
  EXPECT_TRUE(ck.config.attention_bias);
  EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(ck.tensors.at("model.layers.0.self_attn.k_proj.bias").shape, (std::vector<int64_t>{4}));
}

TEST(Checkpoint, ExpectedShapes) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 10, c.hidden_size = 6, c.intermediate_size = 7, c.num_hidden_layers = 3;
  c.num_attention_heads = 3, c.num_key_value_heads = 1, c.head_dim = 5;
  auto s = expected_tensor_shapes(c);
  EXPECT_EQ(s.size(), 3u + 3u * 9u);
  EXPECT_EQ(s.at("model.embed_tokens.weight"), (std::vector<int64_t>{10, 6}));
  EXPECT_EQ(s.at("lm_head.weight"), (std::vector<int64_t>{10, 6}));
  EXPECT_EQ(s.at("model.norm.weight"), (std::vector<int64_t>{6}));
  EXPECT_EQ(s.at("model.layers.2.self_attn.q_proj.weight"), (std::vector<int64_t>{15, 6}));
  EXPECT_EQ(s.at("model.layers.2.self_attn.k_proj.weight"), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(s.at("model.layers.2.self_attn.v_proj.weight"), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(s.at("model.layers.2.self_attn.o_proj.weight"), (std::vector<int64_t>{6, 15}));
  EXPECT_EQ(s.at("model.layers.2.mlp.gate_proj.weight"), (std::vector<int64_t>{7, 6}));
  EXPECT_EQ(s.at("model.layers.2.mlp.up_proj.weight"), (std::vector<int64_t>{7, 6}));
  EXPECT_EQ(s.at("model.layers.2.mlp.down_proj.weight"), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(s.at("model.layers.0.post_attention_layernorm.weight"), (std::vector<int64_t>{6}));

  c.tie_word_embeddings = true;
  c.attention_bias = true;
  s = expected_tensor_shapes(c);
  EXPECT_EQ(s.count("lm_head.weight"), 0u);
  EXPECT_EQ(s.at("model.layers.1.self_attn.q_proj.bias"), (std::vector<int64_t>{15}));
  EXPECT_EQ(s.at("model.layers.1.self_attn.k_proj.bias"), (std::vector<int64_t>{5}));
  EXPECT_EQ(s.at("model.layers.1.self_attn.v_proj.bias"), (std::vector<int64_t>{5}));
  // transformers' LlamaAttention: o_proj = Linear(..., bias=attention_bias); Qwen2's o_proj has none.
  EXPECT_EQ(s.at("model.layers.1.self_attn.o_proj.bias"), (std::vector<int64_t>{6}));
  c.architecture = "qwen2";
  EXPECT_EQ(expected_tensor_shapes(c).count("model.layers.1.self_attn.o_proj.bias"), 0u);
}

// A temporary model directory: a fixture's weights with an edited config.json.
class CheckpointBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("medtune_ck_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Copies `from`'s weights and writes its config.json with `edit` applied.
  void make(const std::string& from, const nlohmann::json& edit) {
    fs::copy_file(kDir + from + "/model.safetensors", dir_ / "model.safetensors");
    std::ifstream in(kDir + from + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg.merge_patch(edit);
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
  }
  std::string expect_bad() {
    try {
      open_checkpoint(dir_.string());
    } catch (const BadInput& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "no exception";
    return "";
  }
  fs::path dir_;
};

TEST_F(CheckpointBroken, MissingLayer) {
  make("tiny_llama", {{"num_hidden_layers", 3}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find(": missing tensor 'model.layers.2."), std::string::npos) << msg;
}

TEST_F(CheckpointBroken, WrongShapeNamesConfigFields) {
  make("tiny_llama", {{"intermediate_size", 13}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("tensor 'model.layers.0.mlp.down_proj.weight' has shape [8, 12], expected [8, 13]"
                     " (from config.json: intermediate_size=13, hidden_size=8)"),
            std::string::npos)
      << msg;
}

TEST_F(CheckpointBroken, WrongHeadCount) {
  make("tiny_llama", {{"num_key_value_heads", 2}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("self_attn.k_proj.weight' has shape [4, 8], expected [8, 8]"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("num_key_value_heads=2"), std::string::npos) << msg;
}

TEST_F(CheckpointBroken, UntiedConfigWithoutLmHead) {
  make("tiny_qwen2_tied", {{"tie_word_embeddings", false}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("missing tensor 'lm_head.weight'"), std::string::npos) << msg;
}

TEST_F(CheckpointBroken, MissingBiasWhenConfigAsksForIt) {
  make("tiny_llama", {{"attention_bias", true}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("missing tensor 'model.layers.0.self_attn.k_proj.bias'"), std::string::npos) << msg;
}

TEST_F(CheckpointBroken, UnsupportedArchitecture) {
  make("tiny_llama", {{"model_type", "gemma"}});
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("config.json: unsupported architecture 'gemma'"), std::string::npos) << msg;
}

TEST_F(CheckpointBroken, NoConfig) {
  fs::copy_file(kDir + "tiny_llama/model.safetensors", dir_ / "model.safetensors");
  EXPECT_NE(expect_bad().find("no config.json"), std::string::npos);
}

TEST_F(CheckpointBroken, TiedConfigIgnoresStoredLmHead) {
  // transformers ties lm_head to embed_tokens and ignores a stored copy; so do we.
  make("tiny_llama", {{"tie_word_embeddings", true}});
  Checkpoint ck = open_checkpoint(dir_.string());
  EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(ck.tensors.size(), 20u);
}

TEST_F(CheckpointBroken, NotAModelFile) {
  std::ofstream(dir_ / "notes.txt") << "hello";
  const std::string path = (dir_ / "notes.txt").string();
  try {
    open_checkpoint(path);
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_checkpoint((dir_ / "absent").string()), BadInput);
}

TEST_F(CheckpointBroken, GarbageGgufIsBadInput) {
  std::ofstream(dir_ / "m.gguf") << "GGUF but not really";
  EXPECT_THROW(open_checkpoint((dir_ / "m.gguf").string()), BadInput);
}

// The transformers-generated model fixtures of the model tests, when present, must open as well.
TEST(Checkpoint, OpensTransformersFixtures) {
  const fs::path hf = fs::path(MEDTUNE_SOURCE_DIR) / "tests/fixtures/hf";
  if (!fs::is_directory(hf)) GTEST_SKIP() << "no " << hf;
  int n = 0;
  for (const auto& e : fs::directory_iterator(hf)) {
    const fs::path base = e.path() / "base";
    if (!fs::is_regular_file(base / "config.json")) continue;
    EXPECT_NO_THROW(open_checkpoint(base.string())) << base;
    ++n;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace medtune::io
