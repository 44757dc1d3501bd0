#include "eval/task_records.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"

namespace medtune::eval {

using nlohmann::json;

namespace {

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; });
}

std::string read_all(const std::string& path) {
  require_input_file(path, "questions");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw BadInput(path + ": read error");
  std::string text = s.str();
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 BOM
  return text;
}

std::string extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

template <class Json = json>
Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const json::exception& e) {
    throw BadInput(where + ": not valid JSON: " + e.what());
  }
}

std::vector<SourceRecord> json_lines(const std::string& path, const std::string& text) {
  const std::string name = std::filesystem::path(path).filename().string();
  std::vector<SourceRecord> out;
  std::istringstream in(text);
  std::string line_text;
  int64_t line = 0;
  while (std::getline(in, line_text)) {
    ++line;
    if (!line_text.empty() && line_text.back() == '\r') line_text.pop_back();
    if (is_blank(line_text)) continue;
    const std::string where = path + ":" + std::to_string(line);
    out.push_back({where, name + ":" + std::to_string(line), line, parse_json(line_text, where)});
  }
  return out;
}

// A whole-file JSON value: a list of records, or an object of records keyed by id. Returns false
// when the value is neither (then the file is read as JSON Lines, or as one record). The document
// is read order-preserving, so a keyed file's records keep the file's order (as Python's json).
bool whole_json(const std::string& path, const nlohmann::ordered_json& doc, std::vector<SourceRecord>& out) {
  const std::string name = std::filesystem::path(path).filename().string();
  if (doc.is_array()) {
    for (size_t i = 0; i < doc.size(); ++i) {
      const std::string n = std::to_string(i + 1);
      out.push_back({path + ": record " + n, name + "#" + n, 0, json::parse(doc[i].dump())});
    }
    return true;
  }
  // A keyed collection has only object values; a single record has strings among its fields.
  if (doc.is_object() && !doc.empty() &&
      std::all_of(doc.begin(), doc.end(), [](const nlohmann::ordered_json& v) { return v.is_object(); })) {
    for (const auto& [key, value] : doc.items())
      out.push_back({path + ": record '" + key + "'", name + "#" + key, 0, json::parse(value.dump())});
    return true;
  }
  return false;
}

std::vector<SourceRecord> json_file(const std::string& path, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  if (text[first] == '[') {
    std::vector<SourceRecord> out;
    whole_json(path, parse_json<nlohmann::ordered_json>(text, path), out);
    return out;
  }
  // '{': a keyed object spread over the file, or JSON Lines. A file that parses as one value is
  // a keyed collection when every field is an object; otherwise (JSON Lines, or a single record
  // on one line) it is read line by line.
  nlohmann::ordered_json doc;
  bool parsed = true;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const json::exception&) {
    parsed = false;
  }
  std::vector<SourceRecord> out;
  if (parsed && whole_json(path, doc, out)) return out;
  return json_lines(path, text);
}

// RFC 4180: rows of cells; "" inside quotes is a quote; quoted cells may span lines.
struct CsvRow {
  int64_t line = 0;
  std::vector<std::string> cells;
};

std::vector<CsvRow> parse_csv(const std::string& path, const std::string& text) {
  std::vector<CsvRow> rows;
  CsvRow row;
  std::string cell;
  bool quoted = false, cell_started = false;
  int64_t line = 1;
  row.line = 1;
  auto end_cell = [&] {
    row.cells.push_back(std::move(cell));
    cell.clear();
    cell_started = false;
  };
  auto end_row = [&] {
    end_cell();
    if (!(row.cells.size() == 1 && is_blank(row.cells[0]))) rows.push_back(std::move(row));
    row = CsvRow{};
  };
  int64_t quote_line = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        cell += c;
      }
      continue;
    }
    if (c == '"' && !cell_started) {
      quoted = true;
      cell_started = true;
      quote_line = line;
    } else if (c == '"') {
      throw BadInput(path + ":" + std::to_string(line) + ": a quote inside an unquoted CSV cell");
    } else if (c == ',') {
      end_cell();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
      ++line;
      row.line = line;
    } else {
      cell += c;
      cell_started = true;
    }
  }
  if (quoted) throw BadInput(path + ":" + std::to_string(quote_line) + ": a quoted CSV cell is never closed");
  if (!cell.empty() || !row.cells.empty()) end_row();
  return rows;
}

std::vector<SourceRecord> csv_file(const std::string& path, const std::string& text,
                                   const std::vector<std::string>& headerless_columns) {
  const std::string name = std::filesystem::path(path).filename().string();
  std::vector<CsvRow> rows = parse_csv(path, text);
  if (rows.empty()) return {};
  std::vector<std::string> columns = headerless_columns;
  size_t first = 0;
  if (rows[0].cells[0] == "question") {
    columns = rows[0].cells;
    first = 1;
  }
  if (columns.empty())
    throw BadInput(path + ": a CSV file needs a header row (first cell 'question') for this task");
  std::vector<SourceRecord> out;
  for (size_t r = first; r < rows.size(); ++r) {
    const std::string where = path + ":" + std::to_string(rows[r].line);
    if (rows[r].cells.size() != columns.size())
      throw BadInput(where + ": " + std::to_string(rows[r].cells.size()) + " cells, expected " +
                     std::to_string(columns.size()) + " (" + (first ? "the header's" : "question,A,B,C,D,answer") +
                     ")");
    json record = json::object();
    for (size_t c = 0; c < columns.size(); ++c) record[columns[c]] = rows[r].cells[c];
    out.push_back({where, name + ":" + std::to_string(rows[r].line), rows[r].line, std::move(record)});
  }
  return out;
}

}  // namespace

std::vector<SourceRecord> read_source_records(const std::string& path,
                                              const std::vector<std::string>& headerless_columns) {
  const std::string ext = extension(path);
  if (ext != ".jsonl" && ext != ".json" && ext != ".csv")
    throw BadInput(path + ": unknown question file type '" + ext + "' (valid: .jsonl, .json, .csv)");
  const std::string text = read_all(path);
  std::vector<SourceRecord> records;
  if (ext == ".jsonl") records = json_lines(path, text);
  if (ext == ".json") records = json_file(path, text);
  if (ext == ".csv") records = csv_file(path, text, headerless_columns);
  if (records.empty()) throw BadInput(path + ": no records");
  return records;
}

}  // namespace medtune::eval
