#include "eval/report_json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"
#include "eval/medqa.h"
#include "io/atomic_file.h"

namespace medtune::eval {

using nlohmann::json;

namespace {

json letter_or_null(int index) {
  return index < 0 ? json(nullptr) : json(option_letter(index));
}

json logprobs_json(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v) out.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  return out;
}

int letter_field(const json& record, const std::string& name, bool allow_null,
                 const std::string& where) {
  const auto it = record.find(name);
  if (it == record.end()) throw BadInput(where + "missing field '" + name + "'");
  if (it->is_null() && allow_null) return -1;
  if (!it->is_string() || it->get<std::string>().size() != 1 || (*it).get<std::string>()[0] < 'A' ||
      (*it).get<std::string>()[0] > 'Z')
    throw BadInput(where + "field '" + name + "' must be a letter A-Z" +
                   (allow_null ? " or null" : "") + ", got " + it->dump());
  return it->get<std::string>()[0] - 'A';
}

std::vector<double> number_list(const json& record, const std::string& name, bool null_is_neg_inf,
                                const std::string& where) {
  std::vector<double> out;
  const auto it = record.find(name);
  if (it == record.end() || it->is_null()) return out;
  if (!it->is_array()) throw BadInput(where + "field '" + name + "' must be a list of numbers");
  for (const auto& v : *it) {
    if (v.is_null() && null_is_neg_inf)
      out.push_back(-std::numeric_limits<double>::infinity());
    else if (v.is_number())
      out.push_back(v.get<double>());
    else
      throw BadInput(where + "field '" + name + "' must be a list of numbers, has " + v.dump());
  }
  return out;
}

}  // namespace

json make_report(const Metrics& metrics, const json& provenance) {
  if (!provenance.is_object()) throw BadInput("make_report: provenance must be a JSON object");
  return {{"format", "medtune-eval-report"},
          {"format_version", 1},
          {"metrics", metrics_json(metrics)},
          {"provenance", provenance}};
}

json question_result_json(const QuestionResult& r) {
  json j = {{"id", r.id},
            {"meta_info", r.meta_info},
            {"gold", letter_or_null(r.gold)},
            {"pred", letter_or_null(r.pred)},
            {"correct", r.pred == r.gold}};
  if (!r.option_logprobs.empty()) j["option_logprobs"] = logprobs_json(r.option_logprobs);
  const std::vector<double> probs = r.option_probs.empty() && !r.option_logprobs.empty()
                                        ? softmax(r.option_logprobs)
                                        : r.option_probs;
  if (!probs.empty()) j["option_probs"] = probs;
  if (r.pred_norm >= 0) j["pred_norm"] = letter_or_null(r.pred_norm);
  if (r.truncated_tokens > 0) j["truncated_tokens"] = r.truncated_tokens;
  return j;
}

QuestionResult question_result_from_json(const json& record, const std::string& where) {
  if (!record.is_object()) throw BadInput(where + "record must be a JSON object");
  QuestionResult r;
  const auto id = record.find("id");
  if (id == record.end() || !id->is_string() || id->get<std::string>().empty())
    throw BadInput(where + "field 'id' must be a non-empty string");
  r.id = id->get<std::string>();
  const auto meta = record.find("meta_info");
  if (meta != record.end() && !meta->is_null()) {
    if (!meta->is_string()) throw BadInput(where + "field 'meta_info' must be a string");
    r.meta_info = meta->get<std::string>();
  }
  r.gold = letter_field(record, "gold", false, where);
  r.pred = letter_field(record, "pred", true, where);
  if (record.contains("pred_norm")) r.pred_norm = letter_field(record, "pred_norm", true, where);
  r.option_logprobs = number_list(record, "option_logprobs", true, where);
  r.option_probs = number_list(record, "option_probs", false, where);
  return r;
}

void write_report_json(const std::string& path, const json& report) {
  io::atomic_write_file(path, report.dump(2) + "\n");
}

void write_predictions_jsonl(const std::string& path, const std::vector<QuestionResult>& results) {
  std::string text;
  for (const auto& r : results) text += question_result_json(r).dump() + "\n";
  io::atomic_write_file(path, text);
}

std::vector<QuestionResult> read_predictions_jsonl(const std::string& path_or_dir) {
  std::string path = path_or_dir;
  if (std::filesystem::is_directory(path))
    path = (std::filesystem::path(path) / kPredictionsName).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open for reading");
  std::vector<QuestionResult> results;
  std::set<std::string> ids;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line) + ": ";
    json record;
    try {
      record = json::parse(text);
    } catch (const json::parse_error& e) {
      throw BadInput(where + "not valid JSON: " + e.what());
    }
    QuestionResult r = question_result_from_json(record, where);
    if (!ids.insert(r.id).second) throw BadInput(where + "duplicate id '" + r.id + "'");
    results.push_back(std::move(r));
  }
  if (results.empty()) throw BadInput(path + ": no question results");
  return results;
}

}  // namespace medtune::eval
