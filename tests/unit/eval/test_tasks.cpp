// The nine lm-eval tasks: every fixture file (tests/fixtures/eval/tasks, one per published layout)
// read and rendered, compared with what lm-evaluation-harness itself gives for the same records
// (lm_eval_prompts.json, written by tools/lm_eval_tasks.py prompts: its zero-shot context,
// doc_to_choice and doc_to_target); then bad records, each with the message a user sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/suite.h"
#include "eval/tasks.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(MEDTUNE_SOURCE_DIR) / "tests/fixtures/eval/tasks";

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path dir = medtune::testing::scratch_dir("eval_tasks");
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// The BadInput message of reading `text` as task `task` from a file named `name`, with the
// directory stripped (every message starts with the path).
std::string error_of(const std::string& task, const std::string& name, const std::string& text, int cop_base = -1) {
  const std::string path = write_file(name, text);
  try {
    McqTaskOptions opt;
    opt.cop_base = cop_base;
    read_task_questions(task_spec(task), path, opt);
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    return name + msg.substr(path.size());
  }
  ADD_FAILURE() << "no error for: " << text;
  return {};
}

TEST(Tasks, EveryFixtureMatchesLmEvalsPromptChoicesAndTarget) {
  std::ifstream in(kFixtures / "lm_eval_prompts.json");
  ASSERT_TRUE(in) << "missing lm_eval_prompts.json";
  const json expected = json::parse(in);
  size_t files = 0, records = 0;
  std::set<std::string> tasks_seen;
  for (const auto& [file, want] : expected["files"].items()) {
    SCOPED_TRACE(file);
    const TaskSpec& task = task_spec(want["task"].get<std::string>());
    tasks_seen.insert(task.name);
    const McqSet set = read_task_questions(task, (kFixtures / file).string(), {});
    ASSERT_EQ(set.items.size(), want["records"].size());
    for (size_t i = 0; i < set.items.size(); ++i) {
      const json& w = want["records"][i];
      const McqItem& item = set.items[i];
      EXPECT_EQ(task_prompt(task, item), w["context"].get<std::string>()) << "record " << i;
      EXPECT_EQ(task_choices(task, item), w["choices"].get<std::vector<std::string>>()) << "record " << i;
      // doc_to_target: an index, or (pubmedqa) the gold choice's text.
      const json& target = w["target"];
      const int gold = target.is_number() ? target.get<int>()
                                          : static_cast<int>(std::find(w["choices"].begin(), w["choices"].end(), target) -
                                                             w["choices"].begin());
      EXPECT_EQ(item.answer, gold) << "record " << i;
      // Every continuation is " " + choice: the scorer's letter or option-text continuations.
      EXPECT_EQ(w["target_delimiter"], " ");
      ++records;
    }
    ++files;
  }
  EXPECT_EQ(tasks_seen.size(), open_medical_llm_tasks().size()) << "every task has a fixture";
  EXPECT_GE(files, 12u);
  EXPECT_GE(records, 24u);
}

TEST(Tasks, OnlyPubmedqaScoresOptionTexts) {
  for (const auto& t : open_medical_llm_tasks()) EXPECT_EQ(t.scores_option_text, t.name == "pubmedqa") << t.name;
  EXPECT_THROW(task_spec("mmlu_virology"), BadInput);
}

TEST(Tasks, RecordIdsAndLocations) {
  const McqSet keyed = read_task_questions(task_spec("pubmedqa"), (kFixtures / "pubmedqa.json").string(), {});
  // ori_pqal.json is keyed by PMID; the file's order is kept (not the keys' sorted order).
  EXPECT_EQ(keyed.items[0].id, "pubmedqa.json#21645374");
  EXPECT_EQ(keyed.items[2].id, "pubmedqa.json#9488747");
  const McqSet csv = read_task_questions(task_spec("mmlu_anatomy"), (kFixtures / "mmlu_anatomy.csv").string(), {});
  EXPECT_EQ(csv.items[1].id, "mmlu_anatomy.csv:2");
  EXPECT_EQ(csv.items[2].question, "A \"true\" rib articulates with:");
  const McqSet list =
      read_task_questions(task_spec("mmlu_clinical_knowledge"), (kFixtures / "mmlu_clinical_knowledge.json").string(), {});
  EXPECT_EQ(list.items[1].id, "mmlu_clinical_knowledge.json#2");
}

TEST(Tasks, HfToJsonOutputIsJsonLinesEvenNamedJson) {
  // datasets' to_json writes JSON Lines by default, and keeps the .json name.
  const std::string path = write_file(
      "mmlu_anatomy.json",
      R"({"question":"Q1?","subject":"anatomy","choices":["a","b","c","d"],"answer":0})"
      "\n"
      R"({"question":"Q2?","subject":"anatomy","choices":["a","b","c","d"],"answer":3})"
      "\n");
  const McqSet set = read_task_questions(task_spec("mmlu_anatomy"), path, {});
  ASSERT_EQ(set.items.size(), 2u);
  EXPECT_EQ(set.items[1].answer, 3);
  EXPECT_EQ(set.items[1].id, "mmlu_anatomy.json:2");
}

TEST(Tasks, MedmcqaCopBaseIsDetectedOrRefused) {
  const std::string rec = R"({"question": "Q?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": )";
  const std::string both = rec + "0}\n" + rec + "4}\n";
  EXPECT_EQ(error_of("medmcqa", "m.jsonl", both),
            "m.jsonl: field 'cop' is 0 at " + write_file("m.jsonl", both) + ":1 and 4 at " + write_file("m.jsonl", both) +
                ":2: neither 0-3 (HF medmcqa) nor 1-4 (the original release); the file mixes them");
  EXPECT_EQ(error_of("medmcqa", "m.jsonl", rec + "2}\n"),
            "m.jsonl: cannot tell whether field 'cop' counts from 0 (HF medmcqa) or 1 (the original release): no record "
            "has cop 0 or 4; say which with --medmcqa-cop-base 0|1");
  // Declared, the same file reads; cop 2 is C when 0-based, B when 1-based.
  const std::string path = write_file("m2.jsonl", rec + "2}\n");
  McqTaskOptions opt;
  opt.cop_base = 1;
  EXPECT_EQ(read_task_questions(task_spec("medmcqa"), path, opt).items[0].answer, 1);
  opt.cop_base = 0;
  EXPECT_EQ(read_task_questions(task_spec("medmcqa"), path, opt).items[0].answer, 2);
  EXPECT_EQ(error_of("medmcqa", "m.jsonl", rec + "4}\n", 0), "m.jsonl:1: field 'cop' is 4, not in 0-3");
  EXPECT_EQ(error_of("medmcqa", "m.jsonl", rec + "-1}\n", 0),
            "m.jsonl:1: field 'cop' is -1: an unlabelled record (MedMCQA's test split has no answers; lm-eval scores "
            "the validation split)");
}

TEST(Tasks, BadRecordsNameFileLocationAndField) {
  EXPECT_EQ(error_of("medmcqa", "m.jsonl", R"({"question": "Q?", "opa": "a", "opb": 3, "opc": "c", "opd": "d", "cop": 0})"),
            "m.jsonl:1: field 'opb' must be a string, got an integer");
  EXPECT_EQ(error_of("medqa_4options", "q.jsonl",
                     R"({"sent1": "Q?", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d", "ending4": "e", "label": 0})"),
            "q.jsonl:1: field 'ending4' is present: medqa_4options has 4 options (A-D)");
  EXPECT_EQ(error_of("medqa_4options", "q.jsonl",
                     R"({"question": "Q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d", "E": "e"}, "answer_idx": "A"})"),
            "q.jsonl:1: field 'options' has 5 options; medqa_4options has 4 (A-D): use the 4-option MedQA files");
  EXPECT_EQ(error_of("pubmedqa", "p.json", R"({"123": {"QUESTION": "Q?", "CONTEXTS": ["x"], "final_decision": "perhaps"}})"),
            "p.json: record '123': field 'final_decision' is 'perhaps', not one of yes, no, maybe");
  EXPECT_EQ(error_of("pubmedqa", "p.jsonl", R"({"question": "Q?", "context": {"contexts": "x"}, "final_decision": "yes"})"),
            "p.jsonl:1: in field 'context': field 'contexts' must be a list, got a string");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.json", R"([{"question": "Q?", "subject": "virology", "choices": ["a","b","c","d"], "answer": 0}])"),
            "a.json: record 1: field 'subject' is 'virology' but the task is mmlu_anatomy (subject 'anatomy')");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.csv", "Q?,a,b,c,d,E\n"), "a.csv:1: field 'answer' is 'E', not one of A-D");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.csv", "Q?,a,b,c,d,A\n\"Q2\nmore?\",a,b,c\n"),
            "a.csv:2: 4 cells, expected 6 (question,A,B,C,D,answer)");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.csv", "\"Q?,a,b,c,d,A\n"), "a.csv:1: a quoted CSV cell is never closed");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.jsonl", "{\"question\": \n"),
            "a.jsonl:1: not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 14: syntax error "
            "while parsing value - unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(error_of("mmlu_anatomy", "a.txt", "x"), "a.txt: unknown question file type '.txt' (valid: .jsonl, .json, .csv)");
}

TEST(Tasks, SkipInvalidCountsBadRecords) {
  const std::string path = write_file(
      "s.jsonl", R"({"question": "Q?", "choices": ["a","b","c","d"], "answer": 9})"
                 "\n"
                 R"({"question": "Q2?", "choices": ["a","b","c","d"], "answer": 1})"
                 "\n");
  McqTaskOptions opt;
  opt.skip_invalid = true;
  const McqSet set = read_task_questions(task_spec("mmlu_anatomy"), path, opt);
  EXPECT_EQ(set.items.size(), 1u);
  EXPECT_EQ(set.skipped, 1);
  EXPECT_EQ(set.skip_reasons[0], path + ":1: field 'answer' is 9, not in 0-3");
}

TEST(Suite, FindsOneFilePerTaskAndListsTheMissing) {
  const auto files = find_suite_files(kFixtures.string());
  ASSERT_EQ(files.size(), 9u);
  EXPECT_EQ(fs::path(files[2]).filename(), "pubmedqa.json");
  EXPECT_EQ(fs::path(files[3]).filename(), "mmlu_anatomy.csv");
  const fs::path dir = medtune::testing::scratch_dir("suite_partial");
  fs::create_directories(dir);
  std::ofstream(dir / "medmcqa.jsonl") << "{}\n";
  try {
    find_suite_files(dir.string());
    FAIL() << "no error";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no data for 8 of the 9 tasks; expected files:\n  medqa_4options.{jsonl,json,csv}\n  pubmedqa"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("medmcqa."), std::string::npos) << msg;
  }
}

TEST(Suite, HolmAdjustmentMatchesStatsmodels) {
  // statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.5], method="holm")[1]
  //   -> [0.04, 0.09, 0.09, 0.5]: 4*0.01; max(3*0.03, 0.04) = 0.09; max(2*0.04, 0.09) = 0.09; 0.5.
  const auto p = holm_adjust({0.01, 0.04, 0.03, 0.5});
  ASSERT_EQ(p.size(), 4u);
  EXPECT_DOUBLE_EQ(p[0], 0.04);
  EXPECT_DOUBLE_EQ(p[1], 0.09);
  EXPECT_DOUBLE_EQ(p[2], 0.09);
  EXPECT_DOUBLE_EQ(p[3], 0.5);
  EXPECT_DOUBLE_EQ(holm_adjust({0.6, 0.9})[1], 1.0);  // capped at 1
}

}  // namespace
}  // namespace medtune::eval
