// Every MedQA dev prompt (lm-eval medqa_4options format) encodes to HF's ids. The MedQA text
// is not committed: set MEDTUNE_MEDQA_DEV to dev.jsonl. The fixture holds, per prompt, a hash of
// the rendered text (so a rendering difference is reported as such), the number of HF ids and a
// hash of those ids: nothing from which the MedQA text could be reconstructed.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fixtures.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

struct Expected {
  uint64_t hash = 0;      // of the prompt text
  size_t count = 0;       // HF token ids
  uint64_t ids_hash = 0;  // of the ids as decimal numbers joined by single spaces
};

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t ids_hash(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += (i ? " " : "") + std::to_string(ids[i]);
  return fnv1a64(text);
}

std::vector<Expected> load_expected(const std::string& file) {
  std::ifstream in(testing::fixture_path(file));
  if (!in) throw std::runtime_error("missing fixture " + file);
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string hash_hex, ids_hex;
    Expected e;
    ss >> hash_hex >> e.count >> ids_hex;
    if (!ss) throw std::runtime_error("bad line in " + file + ": " + line);
    e.hash = std::stoull(hash_hex, nullptr, 16);
    e.ids_hash = std::stoull(ids_hex, nullptr, 16);
    out.push_back(e);
  }
  return out;
}

std::vector<std::string> render_prompts(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const auto& o = j.at("options");
    out.push_back("Question: " + j.at("question").get<std::string>() + "\nA. " + o.at("A").get<std::string>() +
                  "\nB. " + o.at("B").get<std::string>() + "\nC. " + o.at("C").get<std::string>() +
                  "\nD. " + o.at("D").get<std::string>() + "\nAnswer:");
  }
  return out;
}

// `lossless`: the tokenizer has no normalizer, so decode(encode(x)) == x.
void check_all(const Tokenizer& tok, const std::string& hashes_file = "smollm2_medqa_dev_hashes.txt",
               bool lossless = true) {
  const std::string dev = testing::env_or_empty("MEDTUNE_MEDQA_DEV");
  const auto expected = load_expected(hashes_file);
  const auto prompts = render_prompts(dev);
  ASSERT_EQ(prompts.size(), expected.size()) << dev;
  size_t same = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(fnv1a64(prompts[i]), expected[i].hash) << "prompt " << i << " renders differently";
    const auto ids = tok.encode(prompts[i], false);
    const bool equal = ids.size() == expected[i].count && ids_hash(ids) == expected[i].ids_hash;
    EXPECT_TRUE(equal) << "prompt " << i << ": " << ids.size() << " ids, HF has " << expected[i].count
                       << " (or different ids; tools/make_tokenizer_fixtures.py shows them)";
    if (lossless) {
      EXPECT_EQ(tok.decode(ids), prompts[i]) << "prompt " << i;
    }
    same += equal;
  }
  EXPECT_EQ(same, prompts.size());
  std::cout << "[medqa] " << same << "/" << prompts.size() << " prompts token-identical to HF\n";
}

TEST(TokenizerMedqa, DevPromptsMatchHuggingFaceFromTokenizerJson) {
  if (testing::env_or_empty("MEDTUNE_MEDQA_DEV").empty()) GTEST_SKIP() << "set MEDTUNE_MEDQA_DEV";
  check_all(*Tokenizer::from_tokenizer_json(testing::fixture_path("smollm2/tokenizer.json")));
}

// The same through the Unicode normalizers: NFC (Qwen2's), and the Sequence of all of them.
TEST(TokenizerMedqa, DevPromptsMatchHuggingFaceWithNfc) {
  if (testing::env_or_empty("MEDTUNE_MEDQA_DEV").empty()) GTEST_SKIP() << "set MEDTUNE_MEDQA_DEV";
  check_all(*Tokenizer::from_tokenizer_json(testing::fixture_path("tiny_nfc/tokenizer.json")),
            "tiny_nfc_medqa_dev_hashes.txt", false);
}

TEST(TokenizerMedqa, DevPromptsMatchHuggingFaceWithAllNormalizers) {
  if (testing::env_or_empty("MEDTUNE_MEDQA_DEV").empty()) GTEST_SKIP() << "set MEDTUNE_MEDQA_DEV";
  check_all(*Tokenizer::from_tokenizer_json(testing::fixture_path("tiny_normalizers/tokenizer.json")),
            "tiny_normalizers_medqa_dev_hashes.txt", false);
}

TEST(TokenizerMedqa, DevPromptsMatchHuggingFaceQwen2Tiktoken) {
  if (testing::env_or_empty("MEDTUNE_MEDQA_DEV").empty()) GTEST_SKIP() << "set MEDTUNE_MEDQA_DEV";
  const std::string path = testing::env_or_empty("MEDTUNE_QWEN2_TOKENIZER_JSON");
  if (path.empty()) GTEST_SKIP() << "set MEDTUNE_QWEN2_TOKENIZER_JSON (tools/make_tokenizer_fixtures.py --qwen-tiktoken)";
  check_all(*Tokenizer::from_tokenizer_json(path), "qwen2_tiktoken_medqa_dev_hashes.txt", false);
}

TEST(TokenizerMedqa, DevPromptsMatchHuggingFaceFromGguf) {
  if (testing::env_or_empty("MEDTUNE_MEDQA_DEV").empty()) GTEST_SKIP() << "set MEDTUNE_MEDQA_DEV";
  const std::string path = testing::env_or_empty("MEDTUNE_SMOLLM2_GGUF");
  if (path.empty()) GTEST_SKIP() << "set MEDTUNE_SMOLLM2_GGUF";
  const auto gguf = io::GgufFile::open(path);
  check_all(*Tokenizer::from_gguf(gguf));
}

}  // namespace
}  // namespace medtune::tokenizer
