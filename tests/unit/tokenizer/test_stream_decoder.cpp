// StreamDecoder: the pushed pieces concatenate to decode(all ids) and each piece is whole
// UTF-8 characters, even when a character is spread over several byte tokens.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "io/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

void expect_streams(const Tokenizer& tok, const std::string& stress_file) {
  for (const auto& c : testing::load_stress(stress_file)) {
    StreamDecoder stream(tok);
    std::string all;
    for (int32_t id : c.ids) {
      const std::string piece = stream.push(id);
      // Whole characters only: sanitizing changes nothing and no character is cut.
      EXPECT_EQ(sanitize_utf8(piece), piece) << c.name;
      EXPECT_EQ(complete_utf8_prefix(piece), piece.size()) << c.name;
      all += piece;
    }
    all += stream.flush();
    EXPECT_EQ(all, tok.decode(c.ids)) << c.name;
  }
}

TEST(StreamDecoder, ByteLevelSmolLM2) {
  expect_streams(*Tokenizer::from_tokenizer_json(testing::fixture_path("smollm2/tokenizer.json")),
                 "smollm2_stress.json");
}

TEST(StreamDecoder, ByteFallbackLlama2) {
  expect_streams(*Tokenizer::from_tokenizer_json(testing::fixture_path("tiny_llama2/tokenizer.json")),
                 "tiny_llama2_stress.json");
}

TEST(StreamDecoder, HoldsBackSplitCharacter) {
  const auto gguf = io::GgufFile::open(testing::fixture_path("ggml-vocab-llama-spm.gguf"));
  const auto tok = Tokenizer::from_gguf(gguf);
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(tok->token_id("\xE2\x96\x81" "a")), "a");  // "▁a", leading space stripped
  EXPECT_EQ(stream.push(tok->token_id("<0xE2>")), "");
  EXPECT_EQ(stream.push(tok->token_id("<0x82>")), "");
  EXPECT_EQ(stream.push(tok->token_id("<0xAC>")), "\xE2\x82\xAC");  // €
  EXPECT_EQ(stream.push(tok->token_id("<0xE2>")), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end
}

}  // namespace
}  // namespace medtune::tokenizer
