#include "eval/medqa.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/input_file.h"

namespace medtune::eval {

using nlohmann::json;

std::string option_letter(int index) {
  if (index < 0 || index >= 26)
    throw Internal("option index " + std::to_string(index) + " has no letter");
  return std::string(1, static_cast<char>('A' + index));
}

std::string letter_range(int num_options) {
  return "A-" + option_letter(num_options - 1);
}

namespace {

// A record longer than this is refused before it is parsed or tokenized: no real question is
// anywhere near it, and one that were would not fit any model's context.
constexpr size_t kMaxRecordBytes = 1 << 20;

// Values quoted in messages are cut short: a whole vignette in an error line hides the point.
std::string shorten(const std::string& s) {
  constexpr size_t kMax = 60;
  return s.size() <= kMax ? s : s.substr(0, kMax) + "...";
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; });
}

// Record-level failure; the caller prefixes "file:line: ".
struct RecordError {
  std::string message;
};

// A field that is absent or JSON null counts as absent: re-packagings often write null for
// "not applicable" (meta_info), and for required fields both read as "missing".
const json* find_field(const json& record, const std::string& name) {
  const auto it = record.find(name);
  if (it == record.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string string_field(const json& record, const std::string& name, bool required) {
  const json* v = find_field(record, name);
  if (!v) {
    if (required) throw RecordError{"missing field '" + name + "'"};
    return {};
  }
  if (!v->is_string())
    throw RecordError{"field '" + name + "' must be a string, got " + json_type_name(*v)};
  return v->get<std::string>();
}

void require_text(const std::string& text, const std::string& field) {
  if (is_blank(text)) throw RecordError{"field '" + field + "' is empty"};
}

// "C" -> 2 when within the first num_options letters, else -1.
int letter_index(const std::string& s, int num_options) {
  if (s.size() != 1 || s[0] < 'A' || s[0] >= 'A' + num_options) return -1;
  return s[0] - 'A';
}

std::vector<std::string> read_options(const json& record) {
  const json* v = find_field(record, "options");
  if (!v) throw RecordError{"missing field 'options'"};
  std::vector<std::string> options;
  if (v->is_object()) {
    // nlohmann keeps object keys sorted, so iteration is letter order; gaps are caught below.
    for (const auto& [key, text] : v->items()) {
      if (key.size() != 1 || key[0] < 'A' || key[0] > 'Z')
        throw RecordError{"field 'options' has key '" + shorten(key) + "', not a capital letter"};
      if (key[0] != 'A' + static_cast<int>(options.size()))
        throw RecordError{"field 'options' skips letter " +
                          option_letter(static_cast<int>(options.size())) +
                          " (letters must run A, B, C, ... without gaps)"};
      if (!text.is_string())
        throw RecordError{"field 'options." + key + "' must be a string, got " + json_type_name(text)};
      options.push_back(text.get<std::string>());
    }
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const json& text = (*v)[i];
      if (i >= 26) throw RecordError{"field 'options' has more than 26 entries"};
      if (!text.is_string())
        throw RecordError{"field 'options[" + std::to_string(i) + "]' must be a string, got " +
                          json_type_name(text)};
      options.push_back(text.get<std::string>());
    }
  } else {
    throw RecordError{
        std::string("field 'options' must be an object {\"A\": ...} or a list, got ") +
        json_type_name(*v)};
  }
  return options;
}

// lm-eval-harness: ending0..endingN with no gaps.
std::vector<std::string> read_endings(const json& record) {
  std::map<int, std::string> endings;
  for (const auto& [key, value] : record.items()) {
    if (key.rfind("ending", 0) != 0 || key.size() == 6) continue;
    const std::string digits = key.substr(6);
    if (!std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        digits.size() > 2)
      continue;
    if (!value.is_string())
      throw RecordError{"field '" + key + "' must be a string, got " + json_type_name(value)};
    endings[std::stoi(digits)] = value.get<std::string>();
  }
  std::vector<std::string> options;
  for (const auto& [index, text] : endings) {
    if (index != static_cast<int>(options.size()))
      throw RecordError{"field 'ending" + std::to_string(options.size()) +
                        "' is missing (endings must run 0, 1, 2, ...)"};
    options.push_back(text);
  }
  if (options.size() > 26) throw RecordError{"more than 26 endings"};
  return options;
}

int label_field(const json& record, int num_options) {
  const json* v = find_field(record, "label");
  if (!v) return -1;
  if (!v->is_number_integer())
    throw RecordError{std::string("field 'label' must be a 0-based integer, got ") + json_type_name(*v)};
  const int64_t label = v->get<int64_t>();
  if (label < 0 || label >= num_options)
    throw RecordError{"field 'label' is " + std::to_string(label) + ", not in 0-" +
                      std::to_string(num_options - 1)};
  return static_cast<int>(label);
}

// The gold index from answer_idx / label / answer, cross-checking every one that is present.
int read_gold(const json& record, const std::vector<std::string>& options) {
  const int n = static_cast<int>(options.size());
  int gold = -1;
  std::string gold_source;
  if (find_field(record, "answer_idx")) {
    const json& v = record["answer_idx"];
    if (!v.is_string())
      throw RecordError{std::string("field 'answer_idx' must be a letter like \"C\", got ") +
                        json_type_name(v)};
    const std::string letter = v.get<std::string>();
    gold = letter_index(letter, n);
    if (gold < 0)
      throw RecordError{"field 'answer_idx' is '" + shorten(letter) + "', not one of " +
                        letter_range(n)};
    gold_source = "answer_idx";
  }
  const int label = label_field(record, n);
  if (label >= 0) {
    if (gold >= 0 && label != gold)
      throw RecordError{"field 'label' is " + std::to_string(label) + " (" + option_letter(label) +
                        ") but 'answer_idx' is " + option_letter(gold)};
    gold = label;
    gold_source = "label";
  }
  if (find_field(record, "answer")) {
    const std::string answer = string_field(record, "answer", true);
    if (gold >= 0) {
      // MedQA repeats the gold option's text; some re-packagings give its letter instead.
      if (answer != options[static_cast<size_t>(gold)] && answer != option_letter(gold))
        throw RecordError{"field 'answer' is '" + shorten(answer) + "' but option " +
                          option_letter(gold) + " (from '" + gold_source + "') is '" +
                          shorten(options[static_cast<size_t>(gold)]) + "'"};
    } else {
      gold = letter_index(answer, n);
      if (gold < 0) {
        const auto it = std::find(options.begin(), options.end(), answer);
        if (it == options.end())
          throw RecordError{"field 'answer' is '" + shorten(answer) + "', not one of " +
                            letter_range(n) + " nor the text of an option"};
        gold = static_cast<int>(it - options.begin());
      }
    }
  }
  if (gold < 0)
    throw RecordError{"no gold answer: none of 'answer_idx', 'label', 'answer' is present"};
  return gold;
}

McqItem parse_record(const json& record) {
  if (!record.is_object())
    throw RecordError{std::string("record must be a JSON object, got ") + json_type_name(record)};
  McqItem item;
  if (record.contains("question") || record.contains("options")) {
    item.question = string_field(record, "question", true);
    require_text(item.question, "question");
    item.options = read_options(record);
  } else if (record.contains("sent1") || record.contains("ending0")) {
    item.question = string_field(record, "sent1", true);
    require_text(item.question, "sent1");
    const std::string sent2 = string_field(record, "sent2", false);
    if (!is_blank(sent2)) item.question += " " + sent2;
    item.options = read_endings(record);
    if (find_field(record, "answer_idx") == nullptr && find_field(record, "label") == nullptr)
      throw RecordError{"missing field 'label'"};
  } else {
    throw RecordError{"neither 'question' (MedQA) nor 'sent1' (lm-eval) is present"};
  }
  if (item.options.size() < 2)
    throw RecordError{"has " + std::to_string(item.options.size()) +
                      " option(s); a question needs at least 2"};
  std::map<std::string, int> seen;
  for (size_t i = 0; i < item.options.size(); ++i) {
    const std::string letter = option_letter(static_cast<int>(i));
    if (is_blank(item.options[i])) throw RecordError{"option " + letter + " is empty"};
    // Two options with the same text cannot be told apart by any scorer.
    const auto [it, inserted] = seen.emplace(item.options[i], static_cast<int>(i));
    if (!inserted)
      throw RecordError{"options " + option_letter(it->second) + " and " + letter +
                        " have the same text '" + shorten(item.options[i]) + "'"};
  }
  item.answer = read_gold(record, item.options);
  item.meta_info = string_field(record, "meta_info", false);
  return item;
}

// Parses one line, rejecting duplicate keys (nlohmann would silently keep the last one, so
// {"A": "x", "A": "y"} would lose an option without a word).
json parse_line(const std::string& text) {
  struct Frame {
    std::string name;
    std::set<std::string> keys;
  };
  std::vector<Frame> stack;
  std::string last_key;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        stack.push_back({stack.empty() ? std::string() : last_key, {}});
        break;
      case json::parse_event_t::object_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!stack.empty() && !stack.back().keys.insert(last_key).second && duplicate.empty())
          duplicate = stack.back().name.empty() ? last_key : stack.back().name + "." + last_key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json record;
  try {
    record = json::parse(text, callback);
  } catch (const json::parse_error& e) {
    throw RecordError{std::string("not valid JSON: ") + e.what()};
  } catch (const json::out_of_range& e) {  // a number beyond a double (1e999); fuzz_mcq_jsonl
    throw RecordError{(last_key.empty() ? std::string("a number") : "field '" + last_key + "'") +
                      " is out of range: " + e.what()};
  }
  if (!duplicate.empty()) {
    const auto dot = duplicate.find('.');
    if (dot != std::string::npos && duplicate.substr(0, dot) == "options")
      throw RecordError{"duplicate option letter '" + duplicate.substr(dot + 1) +
                        "' in field 'options'"};
    throw RecordError{"duplicate key '" + duplicate + "'"};
  }
  return record;
}

}  // namespace

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}


McqSet read_mcq_jsonl(const std::string& path, bool skip_invalid) {
  require_input_file(path, "questions");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open for reading");
  McqSet set;
  set.path = path;
  const std::string file_name = std::filesystem::path(path).filename().string();
  // First line of each option count, to name them if the file mixes counts.
  std::map<int, int64_t> first_line_by_count;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (line == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 BOM
    if (is_blank(text)) continue;
    const std::string where = path + ":" + std::to_string(line) + ": ";
    try {
      if (text.size() > kMaxRecordBytes)
        throw RecordError{"the record is " + std::to_string(text.size()) + " bytes, more than the " +
                          std::to_string(kMaxRecordBytes) +
                          " a question may hold (MedQA's longest is under 4 KB): not a question"};
      McqItem item = parse_record(parse_line(text));
      item.id = file_name + ":" + std::to_string(line);
      item.line = line;
      first_line_by_count.emplace(static_cast<int>(item.options.size()), line);
      set.items.push_back(std::move(item));
    } catch (const RecordError& e) {
      if (!skip_invalid) throw BadInput(where + e.message);
      ++set.skipped;
      set.skip_reasons.push_back(where + e.message);
    }
  }
  if (in.bad()) throw BadInput(path + ": read error");
  if (first_line_by_count.size() > 1) {
    std::string kinds;
    for (const auto& [count, first] : first_line_by_count)
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(count) + " options first at line " +
               std::to_string(first);
    throw BadInput(path + ": records have different numbers of options (" + kinds +
                   "); accuracies over different option counts are not comparable: split the file");
  }
  if (set.items.empty())
    throw BadInput(path + ": no valid questions (" + std::to_string(set.skipped) +
                   " invalid record(s) skipped)");
  set.num_options = first_line_by_count.begin()->first;
  return set;
}

}  // namespace medtune::eval
