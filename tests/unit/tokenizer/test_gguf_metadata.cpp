// tokenizer.json -> GGUF tokenizer.* metadata (tokenizer/gguf_metadata.h): the keys are written to
// a GGUF, read back by medtune's GGUF tokenizer (which runs what llama.cpp runs for those keys),
// and must give Hugging Face's ids on the committed stress cases; for SmolLM2 the keys must equal
// those of the real GGUF that llama.cpp's converter wrote (when MEDTUNE_SMOLLM2_GGUF is set).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "fixtures.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/gguf_metadata.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

using testing::fixture_path;

// Writes `md` (plus the one key a GGUF needs) to a temporary file and opens it.
io::GgufFile as_gguf(const io::GgufMetadata& md, const std::string& tag) {
  io::GgufMetadata all = {{"general.architecture", io::gguf_string("llama")}};
  all.insert(all.end(), md.begin(), md.end());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("medtune_tok_md_" + tag + "_" + std::to_string(::getpid()) + ".gguf")).string();
  io::write_gguf(path, all, {});
  io::GgufFile g = io::GgufFile::open(path);
  std::filesystem::remove(path);  // the reader keeps its own mapping
  return g;
}

GgufTokenizerMetadata convert(const std::string& fixture, int64_t extra_rows = 0) {
  const std::string path = fixture_path(fixture + "/tokenizer.json");
  const auto tok = Tokenizer::from_tokenizer_json(path);
  return gguf_tokenizer_metadata(path, static_cast<int64_t>(tok->vocab_size()) + extra_rows);
}

// The GGUF tokenizer built from the converted keys gives HF's ids on every stress case, with and
// without the post-processor's special tokens. The exception is reported by the conversion:
// tiny_llama3 has added tokens with lstrip/rstrip/single_word, which GGUF cannot carry, so the
// cases that use them are left out (and must be few).
TEST(GgufTokenizerMetadata, ByteLevelVocabulariesTokenizeAsHuggingFace) {
  for (const std::string fixture : {"smollm2", "tiny_llama3", "tiny_qwen2"}) {
    const GgufTokenizerMetadata md = convert(fixture);
    ASSERT_TRUE(md.metadata.has_value()) << fixture << ": " << md.unsupported;
    std::vector<std::string> literal_only;  // added tokens GGUF cannot describe fully
    for (const std::string& note : md.notes) {
      const size_t a = note.find("added token '");
      ASSERT_NE(a, std::string::npos) << fixture << ": unexpected note " << note;
      const size_t b = note.find("'", a + 13);
      literal_only.push_back(note.substr(a + 13, b - a - 13));
    }
    EXPECT_EQ(literal_only.size(), fixture == "tiny_llama3" ? 2u : 0u) << fixture;
    const io::GgufFile g = as_gguf(*md.metadata, fixture);
    const auto tok = Tokenizer::from_gguf(g);
    const auto cases = testing::load_stress(fixture + "_stress.json");
    size_t checked = 0;
    for (const auto& c : cases) {
      bool uses_literal = false;
      for (const std::string& t : literal_only) uses_literal |= c.input.find(t) != std::string::npos;
      if (uses_literal) continue;
      ++checked;
      EXPECT_EQ(tok->encode(c.input, false), c.ids) << fixture << " " << c.name;
      EXPECT_EQ(tok->encode(c.input, true), c.ids_special) << fixture << " " << c.name;
    }
    EXPECT_GE(checked + 2, cases.size()) << fixture;
    EXPECT_GT(checked, 10u) << fixture;
  }
}

// Model rows beyond the tokenizer's vocabulary become "[PAD<i>]" tokens of type UNUSED (5), as
// convert_hf_to_gguf.py writes them.
TEST(GgufTokenizerMetadata, PadsToTheModelsVocabSize) {
  const GgufTokenizerMetadata md = convert("tiny_llama3", 3);
  ASSERT_TRUE(md.metadata.has_value());
  const io::GgufFile g = as_gguf(*md.metadata, "pad");
  const auto& tokens = g.get_string_array("tokenizer.ggml.tokens");
  const auto types = g.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), types.size());
  const size_t n = tokens.size();
  EXPECT_EQ(tokens[n - 1], "[PAD" + std::to_string(n - 1) + "]");
  EXPECT_EQ(types[n - 1], 5);
  const auto tok = Tokenizer::from_tokenizer_json(fixture_path("tiny_llama3/tokenizer.json"));
  EXPECT_EQ(types[static_cast<size_t>(tok->token_id("<|eot_id|>"))], 3);  // special added token: CONTROL
  EXPECT_EQ(types[static_cast<size_t>(tok->token_id("medtune"))], 4);     // plain added token: USER_DEFINED
  EXPECT_EQ(types[static_cast<size_t>(tok->token_id("9"))], 1);           // vocabulary: NORMAL
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "llama-bpe");
}

// What llama.cpp cannot reproduce is reported, not converted: SentencePiece-style BPE (scores),
// normalizers other than Qwen2's NFC. NFC converts with a note.
TEST(GgufTokenizerMetadata, SaysWhatItCannotConvert) {
  const GgufTokenizerMetadata spm = convert("tiny_llama2");
  EXPECT_FALSE(spm.metadata.has_value());
  EXPECT_NE(spm.unsupported.find("tiny_llama2/tokenizer.json: model"), std::string::npos) << spm.unsupported;
  const GgufTokenizerMetadata norm = convert("tiny_normalizers");
  EXPECT_FALSE(norm.metadata.has_value());
  EXPECT_NE(norm.unsupported.find("normalizer"), std::string::npos) << norm.unsupported;
  const GgufTokenizerMetadata nfc = convert("tiny_nfc");
  ASSERT_TRUE(nfc.metadata.has_value()) << nfc.unsupported;
  ASSERT_EQ(nfc.notes.size(), 1u);
  EXPECT_NE(nfc.notes[0].find("NFC"), std::string::npos);
  EXPECT_THROW(gguf_tokenizer_metadata(fixture_path("smollm2/tokenizer.json"), 100), BadInput)
      << "a model with fewer rows than the tokenizer has ids";
}

// The real SmolLM2 GGUF was written by llama.cpp's converter from the same tokenizer.json: the
// vocabulary, types, merges, pre-tokenizer and the ids the fixture's tokenizer_config.json names
// must be the same. (Its unknown_token_id comes from the original tokenizer_config.json, which the
// trimmed fixture does not carry.)
TEST(GgufTokenizerMetadata, SmolLM2MatchesLlamaCppsConverter) {
  const std::string model = testing::env_or_empty("MEDTUNE_SMOLLM2_GGUF");
  if (model.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF not set (scripts/fetch_model.sh)";
  const io::GgufFile real = io::GgufFile::open(model);
  const GgufTokenizerMetadata md = convert("smollm2");
  ASSERT_TRUE(md.metadata.has_value());
  const io::GgufFile ours = as_gguf(*md.metadata, "smollm2_real");
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
    EXPECT_EQ(ours.get_string_array(key), real.get_string_array(key)) << key;
  EXPECT_EQ(ours.get_int_array("tokenizer.ggml.token_type"), real.get_int_array("tokenizer.ggml.token_type"));
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"})
    EXPECT_EQ(ours.get_string(key), real.get_string(key)) << key;
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"})
    EXPECT_EQ(ours.get_int_or(key, -1), real.get_int_or(key, -2)) << key;
  EXPECT_EQ(ours.get_bool("tokenizer.ggml.add_bos_token"), real.get_bool("tokenizer.ggml.add_bos_token"));
}

}  // namespace
}  // namespace medtune::tokenizer
