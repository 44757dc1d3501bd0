// SentencePiece-style BPE from GGUF (tokenizer.ggml.model = "llama", merges by score, byte
// fallback) against llama.cpp's test vocabulary ggml-vocab-llama-spm.gguf and its .inp/.out
// pairs, whose expected ids were made with Hugging Face's Llama tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "fixtures.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Checks `base`.inp against `base`.out (llama.cpp's format); returns how many inputs it saw.
size_t expect_vocab_test(const Tokenizer& tok, const std::string& base, int32_t bos) {
  const std::string inp = read_all(base + ".inp");
  const std::string out = read_all(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    inputs.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  if (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  std::istringstream lines(out);
  std::string line;
  size_t n = 0;
  for (const auto& text : inputs) {
    if (!std::getline(lines, line)) {
      ADD_FAILURE() << base << ": fewer .out lines than inputs";
      break;
    }
    std::istringstream ids_in(line);
    std::vector<int32_t> expected;
    for (int32_t id; ids_in >> id;) expected.push_back(id);
    EXPECT_EQ(tok.encode(text, false), expected) << base << " input " << n << ": '" << text << "'";
    if (bos >= 0) {
      std::vector<int32_t> with_bos{bos};
      with_bos.insert(with_bos.end(), expected.begin(), expected.end());
      EXPECT_EQ(tok.encode(text, true), with_bos) << base << " input " << n;
    }
    ++n;
  }
  return n;
}

TEST(TokenizerLlamaSpmGguf, MatchesLlamaCppTestVocabulary) {
  const std::string base = testing::fixture_path("ggml-vocab-llama-spm.gguf");
  const auto gguf = io::GgufFile::open(base);
  const auto tok = Tokenizer::from_gguf(gguf);
  EXPECT_EQ(tok->vocab_size(), 32000u);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // BOS comes from add_bos_token (absent here: llama's default, true).
  EXPECT_GE(expect_vocab_test(*tok, base, 1), 40u);
}

// The larger llama.cpp test vocabularies (Llama-3, Qwen2, GPT-2; 2-8 MB each, not committed):
// set MEDTUNE_LLAMACPP_VOCAB_DIR to llama.cpp's models/ folder (in the llama-cpp-python sdist).
TEST(TokenizerLlamaCppVocabs, ByteLevelGgufsMatchTheirOutFiles) {
  const std::string dir = testing::env_or_empty("MEDTUNE_LLAMACPP_VOCAB_DIR");
  if (dir.empty()) GTEST_SKIP() << "set MEDTUNE_LLAMACPP_VOCAB_DIR";
  for (const char* name : {"ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const std::string base = dir + "/" + name;
    const auto gguf = io::GgufFile::open(base);
    const auto tok = Tokenizer::from_gguf(gguf);
    EXPECT_GE(expect_vocab_test(*tok, base, -1), 40u) << base;
  }
}

TEST(TokenizerLlamaSpmGguf, DecodesByteFallbackAndStripsDummyPrefix) {
  const auto gguf = io::GgufFile::open(testing::fixture_path("ggml-vocab-llama-spm.gguf"));
  const auto tok = Tokenizer::from_gguf(gguf);
  const std::string text = "Hello 🦙 world \xe1\x80\x80 ok";
  EXPECT_EQ(tok->decode(tok->encode(text, false)), text);
  EXPECT_EQ(tok->decode(tok->encode(text, true), true), text);
  // <0xE2> alone is an incomplete character: one U+FFFD per byte token, as HF's ByteFallback.
  const int32_t e2 = tok->token_id("<0xE2>");
  ASSERT_GE(e2, 0);
  EXPECT_EQ(tok->decode({e2}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({e2, tok->token_id("<0x82>"), tok->token_id("<0xAC>")}), "\xE2\x82\xAC");
}

}  // namespace
}  // namespace medtune::tokenizer
