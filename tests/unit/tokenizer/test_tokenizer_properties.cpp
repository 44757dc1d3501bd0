// Properties that hold for any input, checked on random bytes: encode never throws or crashes,
// byte-level tokenizers round-trip the sanitized text, the stream decoder reproduces decode(),
// and concurrent encodes (shared word cache) agree with a single-threaded one.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

// Random strings made of pieces that stress the tokenizer: ASCII, whitespace runs, multibyte
// characters, special-token text and raw (often invalid) bytes.
std::vector<std::string> random_inputs(size_t count, uint32_t seed) {
  static const std::vector<std::string> atoms = {
      "a", "Z", " ", "  ", "\t", "\n", "\r\n", "0", "12", "'s", "'LL", "!", "..", "é", "e\xCC\x81",
      "\xE4\xB8\xAD", "\xF0\x9F\xA6\x99", "\xE2\x80\x8D", "\xD8\xB9", "\xE2\x96\x81", "<|im_end|>",
      "<|im_start|>", "<s>", "</s>", "<mask>", "[MASK]", "medtune", "\xC4\xA0", "\xEF\xBF\xBD"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string s;
    const size_t n = rng() % 24;
    for (size_t k = 0; k < n; ++k) {
      if (rng() % 8 == 0) {
        s.push_back(static_cast<char>(rng() & 0xFF));  // a raw byte
      } else {
        s += atoms[rng() % atoms.size()];
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

TEST(TokenizerProperties, RandomBytesNeverBreakEncodeDecodeOrStreaming) {
  const char* dirs[] = {"smollm2", "tiny_llama3", "tiny_qwen2", "tiny_llama2", "tiny_metaspace"};
  const auto inputs = random_inputs(1500, 1234);
  for (const char* dir : dirs) {
    const auto tok = Tokenizer::from_tokenizer_json(testing::fixture_path(std::string(dir) + "/tokenizer.json"));
    const bool byte_level = std::string(dir) == "smollm2" || std::string(dir) == "tiny_qwen2";
    for (const auto& in : inputs) {
      const auto ids = tok->encode(in, false);
      for (int32_t id : ids) ASSERT_LT(static_cast<size_t>(id), tok->vocab_size()) << dir;
      const std::string text = tok->decode(ids);
      EXPECT_EQ(sanitize_utf8(text), text) << dir;
      if (byte_level) {
        // Lossless, except bytes whose character the vocabulary lacks (SmolLM2 has no piece for
        // 21 bytes, e.g. 0x04, 0x06): with no unk token HF drops them, and so do we.
        std::string kept;
        for (char ch : sanitize_utf8(in)) {
          if (tok->token_id(byte_to_unicode(static_cast<uint8_t>(ch))) >= 0) kept.push_back(ch);
        }
        EXPECT_EQ(text, kept) << dir;
      }
      StreamDecoder stream(*tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      EXPECT_EQ(streamed, text) << dir;
    }
  }
}

TEST(TokenizerProperties, ConcurrentEncodesAgree) {
  const auto tok = Tokenizer::from_tokenizer_json(testing::fixture_path("smollm2/tokenizer.json"));
  const auto inputs = random_inputs(800, 99);
  std::vector<std::vector<int32_t>> expected;
  {
    // A fresh tokenizer, so that the threads below fill an empty cache concurrently.
    const auto ref = Tokenizer::from_tokenizer_json(testing::fixture_path("smollm2/tokenizer.json"));
    for (const auto& in : inputs) expected.push_back(ref->encode(in));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < inputs.size(); ++i) {
        const size_t k = (i * 7 + static_cast<size_t>(t) * 13) % inputs.size();
        mismatches[static_cast<size_t>(t)] += tok->encode(inputs[k]) != expected[k];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace medtune::tokenizer
