// Bad tokenizer files fail with BadInput naming the file and the field, never a crash.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

std::string write_temp(const std::string& name, const std::string& content) {
  const auto dir = std::filesystem::temp_directory_path() / ("medtune_tok_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "tokenizer.json").string();
  std::ofstream(path) << content;
  return path;
}

void expect_bad_input(const std::string& path, const std::string& needle) {
  try {
    Tokenizer::from_tokenizer_json(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

const char* kModel = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

TEST(TokenizerErrors, MissingFileAndBadJson) {
  expect_bad_input("/nonexistent/tokenizer.json", "cannot open");
  expect_bad_input(write_temp("badjson", "{not json"), "not valid JSON");
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  expect_bad_input(write_temp("precompiled", std::string("{") + kModel +
                                                 R"(, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                     {"type": "Precompiled", "precompiled_charsmap": "AAAA"}]}})"),
                   "normalizer.normalizers[1]: normalizer type 'Precompiled' (a SentencePiece precompiled_charsmap");
  expect_bad_input(write_temp("bert", std::string("{") + kModel + R"(, "normalizer": {"type": "BertNormalizer"}})"),
                   "normalizer type 'BertNormalizer'");
  expect_bad_input(write_temp("strip", std::string("{") + kModel + R"(, "normalizer": {"type": "Strip", "strip_left": true}})"),
                   "missing field 'strip_right'");
  expect_bad_input(write_temp("unigram", R"({"model": {"type": "Unigram", "vocab": []}})"), "model.type");
  expect_bad_input(write_temp("wp", std::string("{") + kModel + R"(, "pre_tokenizer": {"type": "Whitespace"}})"),
                   "pre_tokenizer");
  expect_bad_input(write_temp("regex", std::string("{") + kModel +
                                           R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"}})"),
                   "cannot compile regex");
}

TEST(TokenizerErrors, InconsistentModel) {
  expect_bad_input(write_temp("merge", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})"),
                   "merge 0");
  expect_bad_input(write_temp("unk", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})"),
                   "unk_token");
  expect_bad_input(write_temp("nomodel", R"({"added_tokens": []})"), "model");
}

TEST(TokenizerErrors, MinimalModelEncodes) {
  const auto tok = Tokenizer::from_tokenizer_json(write_temp("ok", std::string("{") + kModel + "}"));
  EXPECT_EQ(tok->encode("abba", false), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(tok->decode({2, 1, 0}), "ab b a");  // no decoder: HF joins pieces with spaces
}

}  // namespace
}  // namespace medtune::tokenizer
