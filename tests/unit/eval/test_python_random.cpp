// PythonRandom against Python itself, and the few-shot draws against lm-evaluation-harness's
// sampler (tests/fixtures/eval/python_random.json, from tools/make_fewshot_fixtures.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/prompt.h"
#include "eval/python_random.h"
#include "tokenizer/tokenizer.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json fixture() {
  std::ifstream in(MEDTUNE_SOURCE_DIR "/tests/fixtures/eval/python_random.json");
  if (!in) throw std::runtime_error("missing tests/fixtures/eval/python_random.json");
  return json::parse(in);
}

TEST(PythonRandom, WordsMatchPython) {
  const json f = fixture();
  ASSERT_FALSE(f.at("words").empty());
  for (const auto& [seed, expected] : f.at("words").items()) {
    PythonRandom r(std::stoull(seed));
    std::vector<uint32_t> got;
    for (int i = 0; i < 700; ++i) got.push_back(r.getrandbits(32));
    // The fixture keeps words 0-4, 620-629 and 697-699 of 700.
    std::vector<uint32_t> kept(got.begin(), got.begin() + 5);
    kept.insert(kept.end(), got.begin() + 620, got.begin() + 630);
    kept.insert(kept.end(), got.end() - 3, got.end());
    EXPECT_EQ(kept, expected.get<std::vector<uint32_t>>()) << "seed " << seed;
  }
}

TEST(PythonRandom, RandbelowMatchesPython) {
  const json f = fixture();  // named: a range-for over a temporary's member would dangle
  for (const auto& c : f.at("randbelow")) {
    PythonRandom r(c.at("seed").get<uint64_t>());
    const size_t n = c.at("n").get<size_t>();
    std::vector<size_t> got;
    for (int i = 0; i < 20; ++i) got.push_back(r.randbelow(n));
    EXPECT_EQ(got, c.at("values").get<std::vector<size_t>>()) << "n " << n;
  }
}

TEST(PythonRandom, SampleMatchesPythonInBothBranches) {
  const json f = fixture();  // named: a range-for over a temporary's member would dangle
  for (const auto& c : f.at("sample")) {
    PythonRandom r(c.at("seed").get<uint64_t>());
    const size_t n = c.at("n").get<size_t>(), k = c.at("k").get<size_t>();
    for (const auto& expected : c.at("draws"))
      EXPECT_EQ(r.sample(n, k), expected.get<std::vector<size_t>>()) << "n " << n << " k " << k;
  }
  PythonRandom r(1);
  EXPECT_THROW(r.sample(3, 4), BadInput);
}

McqItem item(const std::string& id, int i) {
  return {id, "question " + std::to_string(i), {"a" + std::to_string(i), "b", "c", "d"}, i % 4, "step1", i + 1, ""};
}

TEST(Fewshot, DrawsMatchLmEvalSampler) {
  const json f = fixture();  // named: a range-for over a temporary's member would dangle
  for (const auto& c : f.at("lm_eval")) {
    const int pool_n = c.at("pool").get<int>(), questions_n = c.at("questions").get<int>();
    const bool same = c.at("same_split").get<bool>();
    std::vector<McqItem> pool, questions;
    for (int i = 0; i < pool_n; ++i) pool.push_back(item("pool.jsonl:" + std::to_string(i + 1), i));
    // Same split: question q is pool record q (equal content); otherwise distinct questions.
    for (int i = 0; i < questions_n; ++i)
      questions.push_back(same ? pool[static_cast<size_t>(i)] : item("dev.jsonl:" + std::to_string(i + 1), 1000 + i));
    const auto draws = fewshot_draws(pool, questions, c.at("k").get<int>(), c.at("seed").get<uint64_t>(), same);
    EXPECT_EQ(draws, c.at("draws").get<std::vector<std::vector<size_t>>>()) << (same ? "same split" : "separate pool");
  }
}

void write_jsonl(const fs::path& path, int n, int offset) {
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const int v = offset + i;
    out << json{{"question", "Q" + std::to_string(v) + "?"},
                {"options", {{"A", "a" + std::to_string(v)}, {"B", "b"}, {"C", "c"}, {"D", "d"}}},
                {"answer_idx", std::string(1, static_cast<char>('A' + v % 4))}}
                   .dump()
        << "\n";
  }
}

// The renderer puts each question's own draw, in draw order, before it (lm-eval's delimiters).
TEST(Fewshot, EachQuestionGetsItsOwnExamples) {
  const fs::path dir = medtune::testing::scratch_dir("fewshot");
  fs::create_directories(dir);
  write_jsonl(dir / "pool.jsonl", 50, 0);
  write_jsonl(dir / "dev.jsonl", 30, 1000);
  const auto tok = tokenizer::Tokenizer::from_tokenizer_json(MEDTUNE_SOURCE_DIR "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
  PromptOptions o;
  o.fewshot_k = 3;
  o.fewshot_pool = (dir / "pool.jsonl").string();
  PromptRenderer r(o, *tok, std::nullopt);
  const McqSet dev = read_mcq_jsonl((dir / "dev.jsonl").string(), false);
  EXPECT_THROW(r.render(dev.items[0]), Internal);  // not drawn yet
  r.draw_fewshot(dev);
  const auto expected = fixture().at("lm_eval")[0].at("draws");  // pool 50, 30 questions, k 3, seed 1234
  for (size_t q = 0; q < dev.items.size(); ++q) {
    std::string want;
    for (const auto& i : expected[q]) {
      const int v = i.get<int>();
      const std::string l(1, static_cast<char>('A' + v % 4));
      want += "Question: Q" + std::to_string(v) + "?\nA. a" + std::to_string(v) + "\nB. b\nC. c\nD. d\nAnswer: " + l + "\n\n";
    }
    want += "Question: Q" + std::to_string(1000 + q) + "?\nA. a" + std::to_string(1000 + q) + "\nB. b\nC. c\nD. d\nAnswer:";
    EXPECT_EQ(r.render(dev.items[q]).context, want) << "question " << q;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace medtune::eval
