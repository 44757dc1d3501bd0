// config.json forms against what transformers makes of them (expected.json, written by
// tools/make_safetensors_fixtures.py from transformers' own config classes).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_config.h"
#include "support/bad_input.h"
#include "support/scratch_dir.h"

namespace medtune::io {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/hf_config/";

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

class HfConfigForms : public ::testing::TestWithParam<const char*> {};

TEST_P(HfConfigForms, MatchesTransformers) {
  const std::string dir = kDir + GetParam();
  const ModelConfig c = read_hf_config(dir + "/config.json");
  const nlohmann::json e = load_json(dir + "/expected.json");
  EXPECT_EQ(c.architecture, e["architecture"].get<std::string>());
  EXPECT_EQ(c.vocab_size, e["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, e["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, e["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_hidden_layers, e["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_attention_heads, e["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_key_value_heads, e["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, e["head_dim"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, e["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, e["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.rope_theta, e["rope_theta"].get<double>());
  EXPECT_EQ(c.rope_scaling.type, e["rope_type"].get<std::string>());
  EXPECT_EQ(c.tie_word_embeddings, e["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.attention_bias, e["attention_bias"].get<bool>());
  EXPECT_EQ(c.sliding_window, e["sliding_window"].get<int64_t>());
  EXPECT_EQ(c.bos_token_id, e["bos_token_id"].get<int64_t>());
  EXPECT_EQ(c.eos_token_ids, e["eos_token_ids"].get<std::vector<int64_t>>());
  if (c.rope_scaling.type == "llama3") {
    EXPECT_EQ(c.rope_scaling.factor, e["factor"].get<double>());
    EXPECT_EQ(c.rope_scaling.low_freq_factor, e["low_freq_factor"].get<double>());
    EXPECT_EQ(c.rope_scaling.high_freq_factor, e["high_freq_factor"].get<double>());
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings,
              e["original_max_position_embeddings"].get<int64_t>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfConfigForms,
                         ::testing::Values("llama_classic", "llama_rope_parameters",
                                           "llama3_rope_scaling", "llama3_rope_parameters", "qwen2",
                                           "mistral", "tied_architectures_only"));

TEST(HfConfig, DtypeFieldEitherSpelling) {
  EXPECT_EQ(read_hf_config(kDir + "llama_classic/config.json").torch_dtype, "float16");
  EXPECT_EQ(read_hf_config(kDir + "llama_rope_parameters/config.json").torch_dtype, "bfloat16");
}

// Each broken config: BadInput naming the file and the field / value at fault.
void expect_bad_file(const std::string& name, std::initializer_list<std::string> needles) {
  const std::string path = kDir + name + "/config.json";
  try {
    read_hf_config(path);
    FAIL() << path << ": no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(HfConfig, BrokenFiles) {
  expect_bad_file("unsupported_arch",
                  {"unsupported architecture 'gpt2' (supported: llama, mistral, qwen2)"});
  expect_bad_file("hidden_size_string", {"field 'hidden_size' must be an integer, got string"});
  expect_bad_file("rope_yarn", {"rope_scaling.rope_type", "'yarn'", "not supported"});
  expect_bad_file("rope_dynamic_type", {"'dynamic'", "not supported"});
  expect_bad_file("missing_vocab", {"field 'vocab_size' is missing"});
  expect_bad_file("eos_float", {"field 'eos_token_id' must be an integer, got float"});
  expect_bad_file("does_not_exist", {"cannot open"});
}

std::string bad_text(const std::string& text) {
  try {
    parse_hf_config(text, "x/config.json");
  } catch (const BadInput& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception for " << text;
  return "";
}

const std::string kDims =
    R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 2)";

TEST(HfConfig, BrokenTexts) {
  EXPECT_NE(bad_text("{").find("x/config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(bad_text("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(bad_text("{" + kDims + "}").find("'model_type' is missing"), std::string::npos);
  EXPECT_NE(bad_text(R"({"architectures": ["BertModel"], )" + kDims + "}").find("'BertModel'"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "num_key_value_heads": 3, )" + kDims + "}")
                .find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "num_hidden_layers": -1, "vocab_size": 10, "hidden_size": 8, "intermediate_size": 12, "num_attention_heads": 2})")
                .find("field 'num_hidden_layers' must be a positive integer"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "tie_word_embeddings": "yes", )" + kDims + "}")
                .find("field 'tie_word_embeddings' must be a boolean, got string"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "rope_theta": "big", )" + kDims + "}")
                .find("field 'rope_theta' must be a number, got string"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, )" + kDims + "}")
                .find("rope_scaling.low_freq_factor"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}, )" + kDims + "}")
                .find("'linear'"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "hidden_act": "gelu", )" + kDims + "}")
                .find("hidden_act"),
            std::string::npos);
  EXPECT_NE(bad_text(R"({"model_type": "llama", "mlp_bias": true, )" + kDims + "}").find("mlp_bias"),
            std::string::npos);
}

TEST(HfConfig, DefaultsPerArchitecture) {
  // Values from transformers 5.24 LlamaConfig / MistralConfig / Qwen2Config class defaults.
  const ModelConfig l = parse_hf_config(R"({"model_type": "llama", )" + kDims + "}", "c");
  EXPECT_EQ(l.num_key_value_heads, 2);
  EXPECT_EQ(l.head_dim, 4);
  EXPECT_EQ(l.max_position_embeddings, 2048);
  EXPECT_EQ(l.rms_norm_eps, 1e-6);
  EXPECT_EQ(l.rope_theta, 10000.0);
  EXPECT_FALSE(l.tie_word_embeddings);
  EXPECT_FALSE(l.attention_bias);
  EXPECT_EQ(l.bos_token_id, 1);
  EXPECT_EQ(l.eos_token_ids, std::vector<int64_t>{2});
  const ModelConfig m =
      parse_hf_config(R"({"model_type": "mistral", "vocab_size": 10, "hidden_size": 64,
                          "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 16})",
                      "c");
  EXPECT_EQ(m.num_key_value_heads, 8);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  const ModelConfig q = parse_hf_config(R"({"model_type": "qwen2", )" + kDims + "}", "c");
  EXPECT_TRUE(q.attention_bias);
  EXPECT_EQ(q.sliding_window, 0);
  EXPECT_EQ(q.bos_token_id, -1);
  EXPECT_TRUE(q.eos_token_ids.empty());
  EXPECT_EQ(q.max_position_embeddings, 32768);
  const ModelConfig qs = parse_hf_config(
      R"({"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 1024, )" + kDims + "}", "c");
  EXPECT_EQ(qs.sliding_window, 1024);
  const ModelConfig ms = parse_hf_config(
      R"({"model_type": "mistral", "sliding_window": null, "head_dim": null, "num_key_value_heads": 1, )" + kDims + "}", "c");
  EXPECT_EQ(ms.sliding_window, 0);
  EXPECT_EQ(ms.head_dim, 4);
  const ModelConfig lb = parse_hf_config(R"({"model_type": "llama", "attention_bias": true, )" + kDims + "}", "c");
  EXPECT_TRUE(lb.attention_bias);
}

// generation_config.json's eos_token_id, as GenerationConfig reads it: one id or a list.
TEST(HfConfig, GenerationConfigStopTokens) {
  const std::string path =
      (medtune::testing::scratch_dir("hf_config") / "generation_config.json").string();
  const auto ids_of = [&](const std::string& text) {
    std::ofstream(path) << text;
    return read_generation_eos_token_ids(path);
  };
  // Llama-3.1-8B-Instruct's: <|end_of_text|>, <|eom_id|>, <|eot_id|>.
  EXPECT_EQ(ids_of(R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})"),
            (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(ids_of(R"({"eos_token_id": 2})"), (std::vector<int64_t>{2}));
  EXPECT_TRUE(ids_of(R"({"eos_token_id": null})").empty());
  EXPECT_TRUE(ids_of(R"({"do_sample": true})").empty());
  EXPECT_EQ(medtune::testing::bad_input_message([&] { ids_of(R"({"eos_token_id": ["</s>"]})"); }),
            path + ": field 'eos_token_id' must be an integer, got string");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace medtune::io
