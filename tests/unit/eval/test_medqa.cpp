// Reading multiple-choice sets: every accepted shape, and every way a record can be wrong, with
// the message a user sees. Inputs are tiny made-up records written by the tests themselves.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/medqa.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

namespace fs = std::filesystem;

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path dir = medtune::testing::scratch_dir("eval_medqa");
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// The BadInput message of reading `text` as a file named `name`.
std::string error_of(const std::string& text, const std::string& name = "q.jsonl") {
  const std::string path = write_file(name, text);
  try {
    read_mcq_jsonl(path, false);
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    // Every message names the file; strip the directory so expectations stay short.
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    return name + msg.substr(path.size());
  }
  ADD_FAILURE() << "no error for: " << text;
  return {};
}

const char* kGood =
    R"({"question": "Which drug blocks cell wall synthesis?", "options": {"A": "Gentamicin", "B": "Ciprofloxacin", "C": "Ceftriaxone", "D": "Trimethoprim"}, "answer_idx": "C", "answer": "Ceftriaxone", "meta_info": "step1"})";

TEST(MedqaReader, ReadsReleasedMedqaWithIdsAndLines) {
  const std::string path = write_file(
      "dev.jsonl",
      std::string(kGood) + "\n\n" +
          R"({"question": "Q2?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "A", "answer": "a", "meta_info": "step2&3"})" +
          "\r\n");
  const McqSet set = read_mcq_jsonl(path, false);
  ASSERT_EQ(set.items.size(), 2u);
  EXPECT_EQ(set.num_options, 4);
  EXPECT_EQ(set.skipped, 0);
  const McqItem& first = set.items[0];
  EXPECT_EQ(first.id, "dev.jsonl:1");
  EXPECT_EQ(first.question, "Which drug blocks cell wall synthesis?");
  EXPECT_EQ(first.options, (std::vector<std::string>{"Gentamicin", "Ciprofloxacin", "Ceftriaxone",
                                                     "Trimethoprim"}));
  EXPECT_EQ(first.answer, 2);
  EXPECT_EQ(first.meta_info, "step1");
  // The blank line is passed over but still counts: ids and lines are physical line numbers.
  EXPECT_EQ(set.items[1].id, "dev.jsonl:3");
  EXPECT_EQ(set.items[1].line, 3);
  EXPECT_EQ(set.items[1].answer, 0);
  EXPECT_EQ(set.items[1].meta_info, "step2&3");
}

TEST(MedqaReader, ReadsFiveOptionsAndHuggingFaceAndLmEvalShapes) {
  const McqSet five = read_mcq_jsonl(
      write_file(
          "five.jsonl",
          R"({"question": "Q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d", "E": "e"}, "answer_idx": "E", "answer": "e"})"
          "\n"),
      false);
  EXPECT_EQ(five.num_options, 5);
  EXPECT_EQ(five.items[0].answer, 4);
  EXPECT_EQ(five.items[0].meta_info, "");

  const McqSet hf = read_mcq_jsonl(
      write_file(
          "hf.jsonl",
          R"({"question": "Q1", "options": ["a", "b", "c", "d"], "answer_idx": "B"})"
          "\n"
          R"({"question": "Q2", "options": ["a", "b", "c", "d"], "label": 3})"
          "\n"
          R"({"question": "Q3", "options": ["a", "b", "c", "d"], "answer": "C"})"
          "\n"
          R"({"question": "Q4", "options": ["a", "b", "c", "d"], "answer": "b"})"
          "\n"
          R"({"question": "Q5", "options": ["a", "b", "c", "d"], "answer_idx": "A", "answer": "A"})"
          "\n"),
      false);
  ASSERT_EQ(hf.items.size(), 5u);
  EXPECT_EQ(hf.items[0].answer, 1);
  EXPECT_EQ(hf.items[1].answer, 3);
  EXPECT_EQ(hf.items[2].answer, 2);
  EXPECT_EQ(hf.items[3].answer, 1);  // the answer given as the option's text
  EXPECT_EQ(hf.items[4].answer, 0);

  const McqSet lm = read_mcq_jsonl(
      write_file(
          "lm.jsonl",
          R"({"id": "x", "sent1": "A 40-year-old woman...", "sent2": "", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d", "label": 2})"
          "\n"),
      false);
  EXPECT_EQ(lm.items[0].question, "A 40-year-old woman...");
  EXPECT_EQ(lm.items[0].options, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(lm.items[0].answer, 2);
}

TEST(MedqaReader, RejectsBadRecordsNamingFileLineAndField) {
  const std::string opts = R"("options": {"A": "a", "B": "b", "C": "c", "D": "d"})";
  const std::string good = std::string(kGood) + "\n";
  EXPECT_EQ(error_of(good + R"({"question": "Q", )" + opts + R"(, "answer_idx": "F"})"),
            "q.jsonl:2: field 'answer_idx' is 'F', not one of A-D");
  // nlohmann's own wording follows; only the prefix is ours.
  EXPECT_EQ(
      error_of(good + good + "{\"question\": \"Q\",\n").rfind("q.jsonl:3: not valid JSON: ", 0),
      0u);
  EXPECT_EQ(error_of(R"({)" + opts + R"(, "answer_idx": "A"})"),
            "q.jsonl:1: missing field 'question'");
  EXPECT_EQ(error_of(R"({"question": 7, )" + opts + R"(, "answer_idx": "A"})"),
            "q.jsonl:1: field 'question' must be a string, got an integer");
  EXPECT_EQ(error_of(R"({"question": "  ", )" + opts + R"(, "answer_idx": "A"})"),
            "q.jsonl:1: field 'question' is empty");
  EXPECT_EQ(
      error_of(
          R"({"question": "Q", "options": {"A": "a", "B": "", "C": "c", "D": "d"}, "answer_idx": "A"})"),
      "q.jsonl:1: option B is empty");
  EXPECT_EQ(
      error_of(
          R"({"question": "Q", "options": {"A": "a", "B": "b", "B": "c", "D": "d"}, "answer_idx": "A"})"),
      "q.jsonl:1: duplicate option letter 'B' in field 'options'");
  EXPECT_EQ(
      error_of(
          R"({"question": "Q", "options": {"A": "a", "B": "b", "C": "c", "E": "d"}, "answer_idx": "A"})"),
      "q.jsonl:1: field 'options' skips letter D (letters must run A, B, C, ... without gaps)");
  EXPECT_EQ(
      error_of(
          R"({"question": "Q", "options": {"A": "a", "B": "b", "C": "a", "D": "d"}, "answer_idx": "A"})"),
      "q.jsonl:1: options A and C have the same text 'a'");
  EXPECT_EQ(error_of(R"({"question": "Q", )" + opts + R"(, "answer_idx": "C", "answer": "b"})"),
            "q.jsonl:1: field 'answer' is 'b' but option C (from 'answer_idx') is 'c'");
  EXPECT_EQ(error_of(R"({"question": "Q", )" + opts + R"(, "answer_idx": 2})"),
            "q.jsonl:1: field 'answer_idx' must be a letter like \"C\", got an integer");
  EXPECT_EQ(error_of(R"({"question": "Q", )" + opts + R"(})"),
            "q.jsonl:1: no gold answer: none of 'answer_idx', 'label', 'answer' is present");
  EXPECT_EQ(error_of(R"({"question": "Q", "options": ["a", "b", "c", "d"], "label": 4})"),
            "q.jsonl:1: field 'label' is 4, not in 0-3");
  EXPECT_EQ(
      error_of(
          R"({"question": "Q", "options": ["a", "b", "c", "d"], "answer_idx": "A", "label": 1})"),
      "q.jsonl:1: field 'label' is 1 (B) but 'answer_idx' is A");
  EXPECT_EQ(
      error_of(R"({"sent1": "Q", "ending0": "a", "ending1": "b", "ending3": "d", "label": 0})"),
      "q.jsonl:1: field 'ending2' is missing (endings must run 0, 1, 2, ...)");
  EXPECT_EQ(error_of(R"({"question": "Q", )" + opts + R"(, "answer_idx": "A", "meta_info": 1})"),
            "q.jsonl:1: field 'meta_info' must be a string, got an integer");
  EXPECT_EQ(error_of(R"(["Q"])"), "q.jsonl:1: record must be a JSON object, got a list");
  EXPECT_EQ(error_of(R"({"prompt": "Q"})"),
            "q.jsonl:1: neither 'question' (MedQA) nor 'sent1' (lm-eval) is present");
  EXPECT_EQ(error_of("\n  \n"), "q.jsonl: no valid questions (0 invalid record(s) skipped)");
}

TEST(MedqaReader, MixedOptionCountsAreAnErrorEvenWhenSkipping) {
  const std::string text =
      std::string(kGood) + "\n" + kGood + "\n" +
      R"({"question": "Q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d", "E": "e"}, "answer_idx": "E"})" +
      "\n";
  EXPECT_EQ(error_of(text, "mixed.jsonl"),
            "mixed.jsonl: records have different numbers of options (4 options first at line 1, 5 "
            "options first at "
            "line 3); accuracies over different option counts are not comparable: split the file");
  EXPECT_THROW(read_mcq_jsonl(write_file("mixed.jsonl", text), true), BadInput);
}

TEST(MedqaReader, SkipInvalidCountsAndKeepsReasons) {
  const std::string text =
      std::string(kGood) + "\n" + "not json\n" +
      R"({"question": "Q", "options": ["a", "b", "c", "d"], "answer_idx": "Z"})" + "\n" + kGood +
      "\n";
  const std::string path = write_file("skip.jsonl", text);
  EXPECT_THROW(read_mcq_jsonl(path, false), BadInput);
  const McqSet set = read_mcq_jsonl(path, true);
  ASSERT_EQ(set.items.size(), 2u);
  EXPECT_EQ(set.items[1].id, "skip.jsonl:4");
  EXPECT_EQ(set.skipped, 2);
  ASSERT_EQ(set.skip_reasons.size(), 2u);
  EXPECT_NE(set.skip_reasons[0].find("skip.jsonl:2: not valid JSON"), std::string::npos)
      << set.skip_reasons[0];
  EXPECT_NE(set.skip_reasons[1].find("skip.jsonl:3: field 'answer_idx' is 'Z', not one of A-D"),
            std::string::npos)
      << set.skip_reasons[1];
}

// A number beyond a double is an out_of_range in nlohmann, not a parse_error: it must still be a
// BadInput naming the line and the field, and skippable. Found by fuzz/fuzz_mcq_jsonl.
TEST(MedqaReader, NumberBeyondADoubleIsBadInputNamingTheField) {
  const std::string opts = R"("options": ["a", "b", "c", "d"])";
  const std::string good = std::string(kGood) + "\n";
  const std::string huge = R"({"question": "Q", )" + opts + R"(, "label": 1e999})";
  EXPECT_EQ(error_of(good + huge + "\n").rfind("q.jsonl:2: field 'label' is out of range: ", 0),
            0u);
  EXPECT_EQ(error_of("-88888888e888888888888\n").rfind("q.jsonl:1: a number is out of range: ", 0),
            0u);
  const McqSet set = read_mcq_jsonl(write_file("huge.jsonl", good + huge + "\n" + good), true);
  EXPECT_EQ(set.items.size(), 2u);
  ASSERT_EQ(set.skip_reasons.size(), 1u);
  EXPECT_NE(set.skip_reasons[0].find("huge.jsonl:2: field 'label' is out of range"),
            std::string::npos)
      << set.skip_reasons[0];
}

TEST(MedqaReader, MissingFileIsBadInput) {
  EXPECT_THROW(read_mcq_jsonl("/nonexistent/dev.jsonl", false), BadInput);
}

// The real MedQA dev set, when the environment points at it (never committed).
TEST(MedqaReader, RealDevSetWhenAvailable) {
  const char* path = std::getenv("MEDTUNE_MEDQA_DEV");
  if (!path || !*path) GTEST_SKIP() << "MEDTUNE_MEDQA_DEV not set";
  const McqSet set = read_mcq_jsonl(path, false);
  EXPECT_EQ(set.items.size(), 1272u);
  EXPECT_EQ(set.num_options, 4);
  EXPECT_EQ(set.skipped, 0);
  for (const auto& item : set.items) {
    ASSERT_EQ(item.options.size(), 4u);
    ASSERT_TRUE(item.meta_info == "step1" || item.meta_info == "step2&3") << item.id;
  }
}

}  // namespace
}  // namespace medtune::eval
