// Records of a question file in the layouts the evaluation data sets are published in, each with
// where it came from so a bad one can be named:
//   .jsonl                 JSON Lines, one object per line            where = "file:LINE"
//   .json                  a JSON list of objects                     where = "file: record N" (1-based)
//                          a JSON object of objects keyed by id       where = "file: record 'KEY'"
//                          (PubMedQA's ori_pqal.json, keyed by PMID)
//                          JSON Lines (Hugging Face `datasets` to_json writes this by default,
//                          and MedMCQA's release names its JSON Lines files .json)
//   .csv                   RFC 4180 CSV (quoted fields may hold commas, quotes and newlines).
//                          With a header row (its first cell is "question") each row becomes an
//                          object keyed by the header; without one (MMLU's original release:
//                          question,A,B,C,D,answer) the columns are named by `headerless_columns`.
//                          where = "file:LINE" (the line the row starts on)
// Blank lines of JSON Lines and CSV are not records. Everything else that is not a record (broken
// JSON, a row with the wrong number of cells) is a BadInput naming the file and line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace medtune::eval {

struct SourceRecord {
  std::string where;   // for messages: "dev.jsonl:17", "ori_pqal.json: record '21645374'"
  std::string id;      // stable across machines: "<file name>:<line>" or "<file name>#<key or N>"
  int64_t line = 0;    // 1-based line where known, else 0
  nlohmann::json value;
};

std::vector<SourceRecord> read_source_records(const std::string& path,
                                              const std::vector<std::string>& headerless_columns);

}  // namespace medtune::eval
