// Multiple-choice question sets (MedQA / USMLE and its re-packagings) read from JSON Lines.
//
// Accepted record shapes (one JSON object per line; see docs/evaluation.md for examples):
//   MedQA as released:  question, options {"A": .., "B": .., ...}, answer_idx "C",
//                       answer (the gold option's text; must match when present), meta_info
//   Hugging Face forms: question, options [..] (list, letter order), and the gold as one of
//                       answer_idx "C" | label 2 (0-based) | answer "C" (when it is a letter)
//   lm-eval-harness:    sent1 (+ sent2 when non-empty), ending0..endingN, label (0-based)
//
// Every record is validated; a bad record is a BadInput naming file, line and field, e.g.
//   dev.jsonl:17: field 'answer_idx' is 'F', not one of A-D
// With skip_invalid the record is counted in McqSet::skipped and its message kept instead.
// Blank (whitespace-only) lines are not records: they are passed over silently and not counted,
// because a trailing newline or a blank separator is an editor artefact, not a broken question.
// A file mixing option counts (4- and 5-option MedQA) is always an error, even with skip_invalid:
// accuracies over different option counts are not comparable, and the letter-prior baseline
// would be meaningless.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace medtune::eval {

// "an integer", "a string", "a list", ... for a field's JSON value in a record's error message.
const char* json_type_name(const nlohmann::json& v);

struct McqItem {
  std::string id;  // "<file name>:<line>": stable across machines, so runs can be compared by id
  std::string question;
  std::vector<std::string> options;  // in letter order: options[0] is A
  int answer = -1;                   // index into options
  std::string meta_info;             // MedQA's "step1" / "step2&3"; empty when absent
  int64_t line = 0;                  // 1-based line in the file
  std::string passage;               // text the question is about (PubMedQA's abstract); else empty
};

struct McqSet {
  std::string path;
  std::vector<McqItem> items;
  int64_t skipped = 0;                    // invalid records passed over (skip_invalid only)
  std::vector<std::string> skip_reasons;  // one message per skipped record, in file order
  int num_options = 0;                    // the same for every item
};

// Reads and validates a whole file. Throws BadInput for an unreadable file, an invalid record
// (unless skip_invalid), mixed option counts, or a file with no valid question at all.
McqSet read_mcq_jsonl(const std::string& path, bool skip_invalid);

// "A".."Z" for 0..25.
std::string option_letter(int index);

// "A-D" for 4 options: the range used in messages and reports.
std::string letter_range(int num_options);

}  // namespace medtune::eval
