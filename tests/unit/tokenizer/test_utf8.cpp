// UTF-8 sanitizing (against Python's errors="replace") and the GPT-2 byte mapping.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

TEST(Utf8, SanitizeMatchesPythonReplaceOnStressCorpus) {
  int invalid = 0;
  for (const auto& c : testing::load_stress("smollm2_stress.json")) {
    EXPECT_EQ(sanitize_utf8(c.input), c.sanitized) << c.name;
    invalid += c.input != c.sanitized;
  }
  EXPECT_GE(invalid, 6);  // the corpus really has invalid inputs
}

TEST(Utf8, SanitizeMaximalSubparts) {
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\xEF\xBF\xBD");              // one truncated char
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(sanitize_utf8("ok \xF0\x9F\xA6\x99"), "ok \xF0\x9F\xA6\x99");
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(complete_utf8_prefix("ab"), 2u);
  EXPECT_EQ(complete_utf8_prefix("a\xE2\x82"), 1u);
  EXPECT_EQ(complete_utf8_prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\xA6"), 0u);
}

TEST(ByteLevel, RoundTripsEveryByteAndMapsSpaceToGdot) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string mapped;
  bytes_to_unicode(all, mapped);
  std::string back;
  ASSERT_TRUE(unicode_to_bytes(mapped, back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), "A");
  std::string bad;
  EXPECT_FALSE(unicode_to_bytes("\xE4\xB8\xAD", bad));  // 中 is not a mapped character
}

}  // namespace
}  // namespace medtune::tokenizer
