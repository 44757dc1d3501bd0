#include "eval/tasks.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "core/error.h"
#include "eval/task_records.h"

namespace medtune::eval {

using nlohmann::json;

const std::vector<TaskSpec>& open_medical_llm_tasks() {
  static const std::vector<TaskSpec> tasks = {
      {"medqa_4options", TaskKind::medqa, "", false},
      {"medmcqa", TaskKind::medmcqa, "", false},
      {"pubmedqa", TaskKind::pubmedqa, "", true},
      {"mmlu_anatomy", TaskKind::mmlu, "anatomy", false},
      {"mmlu_clinical_knowledge", TaskKind::mmlu, "clinical_knowledge", false},
      {"mmlu_college_biology", TaskKind::mmlu, "college_biology", false},
      {"mmlu_college_medicine", TaskKind::mmlu, "college_medicine", false},
      {"mmlu_medical_genetics", TaskKind::mmlu, "medical_genetics", false},
      {"mmlu_professional_medicine", TaskKind::mmlu, "professional_medicine", false},
  };
  return tasks;
}

const TaskSpec& task_spec(const std::string& name) {
  std::string valid;
  for (const auto& t : open_medical_llm_tasks()) {
    if (t.name == name) return t;
    valid += (valid.empty() ? "" : ", ") + t.name;
  }
  throw BadInput("unknown task '" + name + "' (valid: " + valid + ")");
}

namespace {

// Record-level failure; the caller prefixes the record's location.
struct RecordError {
  std::string message;
};

std::string shorten(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 60) + "..."; }

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; });
}

const json& field(const json& record, const std::string& name) {
  const auto it = record.find(name);
  if (it == record.end() || it->is_null()) throw RecordError{"missing field '" + name + "'"};
  return *it;
}

// Texts are taken as they are (lm-eval does not strip them, except MMLU's question): only a
// value that is not a string is refused; an empty question is refused too, since no prompt
// without one measures anything.
std::string text_field(const json& record, const std::string& name, bool non_empty) {
  const json& v = field(record, name);
  if (!v.is_string()) throw RecordError{"field '" + name + "' must be a string, got " + json_type_name(v)};
  std::string s = v.get<std::string>();
  if (non_empty && is_blank(s)) throw RecordError{"field '" + name + "' is empty"};
  return s;
}

std::vector<std::string> text_list(const json& record, const std::string& name, size_t count) {
  const json& v = field(record, name);
  if (!v.is_array()) throw RecordError{"field '" + name + "' must be a list, got " + json_type_name(v)};
  if (count > 0 && v.size() != count)
    throw RecordError{"field '" + name + "' has " + std::to_string(v.size()) + " entries, expected " +
                      std::to_string(count)};
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      throw RecordError{"field '" + name + "[" + std::to_string(i) + "]' must be a string, got " + json_type_name(v[i])};
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

int int_in(const json& record, const std::string& name, int lo, int hi) {
  const json& v = field(record, name);
  if (!v.is_number_integer())
    throw RecordError{"field '" + name + "' must be an integer " + std::to_string(lo) + "-" + std::to_string(hi) +
                      ", got " + json_type_name(v)};
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw RecordError{"field '" + name + "' is " + std::to_string(x) + ", not in " + std::to_string(lo) + "-" +
                      std::to_string(hi)};
  return static_cast<int>(x);
}

// "A".."D" -> 0..3, else -1.
int letter_of_four(const std::string& s) { return s.size() == 1 && s[0] >= 'A' && s[0] <= 'D' ? s[0] - 'A' : -1; }

// A gold answer given as 0-3 or as a letter "A".."D" (MMLU's CSV; some JSON re-packagings).
int index_or_letter(const json& record, const std::string& name) {
  const json& v = field(record, name);
  if (v.is_string()) {
    const int i = letter_of_four(v.get<std::string>());
    if (i < 0) throw RecordError{"field '" + name + "' is '" + shorten(v.get<std::string>()) + "', not one of A-D"};
    return i;
  }
  return int_in(record, name, 0, 3);
}

McqItem medqa_item(const json& r) {
  McqItem item;
  if (r.contains("sent1")) {  // lm-eval's source, GBaker/MedQA-USMLE-4-options-hf
    item.question = text_field(r, "sent1", true);
    for (int i = 0; i < 4; ++i) item.options.push_back(text_field(r, "ending" + std::to_string(i), false));
    if (r.contains("ending4"))
      throw RecordError{"field 'ending4' is present: medqa_4options has 4 options (A-D)"};
    item.answer = int_in(r, "label", 0, 3);
    return item;
  }
  if (!r.contains("question")) throw RecordError{"neither 'sent1' (lm-eval) nor 'question' (MedQA) is present"};
  item.question = text_field(r, "question", true);
  const json& options = field(r, "options");
  if (options.is_object()) {
    if (options.size() != 4)
      throw RecordError{"field 'options' has " + std::to_string(options.size()) +
                        " options; medqa_4options has 4 (A-D): use the 4-option MedQA files"};
    for (const std::string letter : {"A", "B", "C", "D"}) {
      if (!options.contains(letter)) throw RecordError{"field 'options' has no '" + letter + "'"};
      if (!options[letter].is_string())
        throw RecordError{"field 'options." + letter + "' must be a string, got " + json_type_name(options[letter])};
      item.options.push_back(options[letter].get<std::string>());
    }
  } else {
    item.options = text_list(r, "options", 4);
  }
  const int gold = letter_of_four(text_field(r, "answer_idx", true));
  if (gold < 0) throw RecordError{"field 'answer_idx' is '" + shorten(r["answer_idx"].get<std::string>()) + "', not one of A-D"};
  item.answer = gold;
  if (r.contains("answer") && r["answer"].is_string() && r["answer"] != item.options[static_cast<size_t>(gold)])
    throw RecordError{"field 'answer' is '" + shorten(r["answer"].get<std::string>()) + "' but option " +
                      option_letter(gold) + " (from 'answer_idx') is '" + shorten(item.options[static_cast<size_t>(gold)]) +
                      "'"};
  return item;
}

McqItem medmcqa_item(const json& r, int cop_base) {
  McqItem item;
  item.question = text_field(r, "question", true);
  for (const char* key : {"opa", "opb", "opc", "opd"}) item.options.push_back(text_field(r, key, false));
  const json& cop = field(r, "cop");
  if (cop.is_number_integer() && cop.get<int64_t>() == -1)
    throw RecordError{"field 'cop' is -1: an unlabelled record (MedMCQA's test split has no answers; lm-eval scores "
                      "the validation split)"};
  item.answer = int_in(r, "cop", cop_base, cop_base + 3) - cop_base;
  return item;
}

McqItem pubmedqa_item(const json& r) {
  McqItem item;
  std::vector<std::string> contexts;
  if (r.contains("QUESTION")) {  // the original release and bigbio/pubmed_qa's source schema
    item.question = text_field(r, "QUESTION", true);
    contexts = text_list(r, "CONTEXTS", 0);
  } else if (r.contains("question")) {  // HF pubmed_qa pqa_labeled
    item.question = text_field(r, "question", true);
    const json& context = field(r, "context");
    if (!context.is_object())
      throw RecordError{std::string("field 'context' must be an object with 'contexts', got ") + json_type_name(context)};
    try {
      contexts = text_list(context, "contexts", 0);
    } catch (const RecordError& e) {
      throw RecordError{"in field 'context': " + e.message};
    }
  } else {
    throw RecordError{"neither 'QUESTION' (PubMedQA, bigbio) nor 'question' (HF pubmed_qa) is present"};
  }
  if (contexts.empty()) throw RecordError{"the abstract has no contexts"};
  for (size_t i = 0; i < contexts.size(); ++i) item.passage += (i ? "\n" : "") + contexts[i];
  item.options = {"yes", "no", "maybe"};
  const std::string decision = text_field(r, "final_decision", true);
  const auto it = std::find(item.options.begin(), item.options.end(), decision);
  if (it == item.options.end())
    throw RecordError{"field 'final_decision' is '" + shorten(decision) + "', not one of yes, no, maybe"};
  item.answer = static_cast<int>(it - item.options.begin());
  return item;
}

McqItem mmlu_item(const json& r, const TaskSpec& task) {
  McqItem item;
  item.question = text_field(r, "question", true);
  if (r.contains("choices")) {  // HF cais/mmlu
    item.options = text_list(r, "choices", 4);
  } else {  // the original release's CSV columns
    for (const char* key : {"A", "B", "C", "D"}) item.options.push_back(text_field(r, key, false));
  }
  item.answer = index_or_letter(r, "answer");
  if (r.contains("subject") && !r["subject"].is_null()) {
    const std::string subject = text_field(r, "subject", false);
    if (subject != task.mmlu_subject)
      throw RecordError{"field 'subject' is '" + shorten(subject) + "' but the task is " + task.name +
                        " (subject '" + task.mmlu_subject + "')"};
  }
  return item;
}

// MedMCQA's cop is 1-4 in the original release and 0-3 in the HF dataset; the two overlap in
// 1-3, so the file's own extremes decide, and a file with neither is refused rather than guessed.
int detect_cop_base(const std::vector<SourceRecord>& records, const std::string& path) {
  std::string zero, four;
  for (const auto& rec : records) {
    if (!rec.value.is_object()) continue;
    const auto it = rec.value.find("cop");
    if (it == rec.value.end() || !it->is_number_integer()) continue;
    if (*it == 0 && zero.empty()) zero = rec.where;
    if (*it == 4 && four.empty()) four = rec.where;
  }
  if (!zero.empty() && !four.empty())
    throw BadInput(path + ": field 'cop' is 0 at " + zero + " and 4 at " + four +
                   ": neither 0-3 (HF medmcqa) nor 1-4 (the original release); the file mixes them");
  if (!zero.empty()) return 0;
  if (!four.empty()) return 1;
  throw BadInput(path + ": cannot tell whether field 'cop' counts from 0 (HF medmcqa) or 1 (the original "
                 "release): no record has cop 0 or 4; say which with --medmcqa-cop-base 0|1");
}

}  // namespace

McqSet read_task_questions(const TaskSpec& task, const std::string& path, const McqTaskOptions& options) {
  const std::vector<std::string> mmlu_csv_columns{"question", "A", "B", "C", "D", "answer"};
  const auto records = read_source_records(path, task.kind == TaskKind::mmlu ? mmlu_csv_columns
                                                                              : std::vector<std::string>{});
  int cop_base = options.cop_base;
  if (task.kind == TaskKind::medmcqa && cop_base < 0) cop_base = detect_cop_base(records, path);
  if (cop_base != -1 && cop_base != 0 && cop_base != 1)
    throw BadInput("the MedMCQA cop base must be 0 or 1, not " + std::to_string(cop_base));
  McqSet set;
  set.path = path;
  set.num_options = task.kind == TaskKind::pubmedqa ? 3 : 4;
  for (const auto& rec : records) {
    try {
      if (!rec.value.is_object())
        throw RecordError{std::string("record must be a JSON object, got ") + json_type_name(rec.value)};
      McqItem item;
      switch (task.kind) {
        case TaskKind::medqa: item = medqa_item(rec.value); break;
        case TaskKind::medmcqa: item = medmcqa_item(rec.value, cop_base); break;
        case TaskKind::pubmedqa: item = pubmedqa_item(rec.value); break;
        case TaskKind::mmlu: item = mmlu_item(rec.value, task); break;
      }
      item.id = rec.id;
      item.line = rec.line;
      set.items.push_back(std::move(item));
    } catch (const RecordError& e) {
      if (!options.skip_invalid) throw BadInput(rec.where + ": " + e.message);
      ++set.skipped;
      set.skip_reasons.push_back(rec.where + ": " + e.message);
    }
  }
  if (set.items.empty())
    throw BadInput(path + ": no valid questions (" + std::to_string(set.skipped) + " invalid record(s) skipped)");
  return set;
}

namespace {

std::string lettered(const std::vector<std::string>& options) {
  std::string s;
  for (size_t i = 0; i < options.size(); ++i) s += option_letter(static_cast<int>(i)) + ". " + options[i] + "\n";
  return s;
}

// Python's str.strip() (MMLU's template strips the question): every code point str.isspace()
// accepts, at either end. The UTF-8 forms of the non-ASCII ones are listed.
size_t space_at_start(const std::string& s, size_t i) {
  static const char* kWide[] = {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81",
                                "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86",
                                "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8",
                                "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  for (const char* w : kWide) {
    const std::string_view sv(w);
    if (s.compare(i, sv.size(), sv) == 0) return sv.size();
  }
  return 0;
}

std::string py_strip(const std::string& s) {
  size_t b = 0;
  while (b < s.size()) {
    const size_t n = space_at_start(s, b);
    if (n == 0) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    // The last code point starts at the last byte that is not a UTF-8 continuation byte.
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at_start(s, start) != e - start) break;
    e = start;
  }
  return s.substr(b, e - b);
}

}  // namespace

std::string task_prompt(const TaskSpec& task, const McqItem& item) {
  switch (task.kind) {
    case TaskKind::medqa:
      return "Question: " + item.question + "\n" + lettered(item.options) + "Answer:";
    case TaskKind::medmcqa:
      return "Question: " + item.question + "\nChoices:\n" + lettered(item.options) + "Answer:";
    case TaskKind::pubmedqa:
      return "Abstract: " + item.passage + "\nQuestion: " + item.question + "\nAnswer:";
    case TaskKind::mmlu: {
      std::string subject = task.mmlu_subject;
      std::replace(subject.begin(), subject.end(), '_', ' ');
      return "The following are multiple choice questions (with answers) about " + subject + ".\n\n" +
             py_strip(item.question) + "\n" + lettered(item.options) + "Answer:";
    }
  }
  return {};
}

std::vector<std::string> task_choices(const TaskSpec& task, const McqItem& item) {
  if (task.scores_option_text) return item.options;
  std::vector<std::string> letters;
  for (size_t i = 0; i < item.options.size(); ++i) letters.push_back(option_letter(static_cast<int>(i)));
  return letters;
}

}  // namespace medtune::eval
