// One key of a training config as it was written (its YAML value, the file and line) and the
// readers that check a value's type and range, every message naming where to fix it. Internal to
// the train_config*.cpp files: train_config.h is the interface.
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace medtune::train::config {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// One top-level key of the config with its value and where it was written, so every message can
// point at the line to fix.
struct Entry {
  std::string key;
  YAML::Node value;
  std::string file;  // the config path as the user gave it; empty for a command-line override
  int line = 0;      // 1-based line of the key in `file`

  bool from_command_line() const { return file.empty(); }
  std::string where() const {
    return from_command_line() ? "command line" : file + ":" + std::to_string(line);
  }
  // Where a node inside the value is (a dataset's `type:` sits on its own line).
  std::string where(const YAML::Node& n) const {
    if (from_command_line() || n.Mark().is_null()) return where();
    return file + ":" + std::to_string(n.Mark().line + 1);
  }
};

// How a value reads in a message: 'text' quoted, or "a list", "a mapping", "nothing".
std::string got(const YAML::Node& n);

// BadInput "WHERE: MESSAGE"; fail_type: "'KEY' must be MUST, got VALUE" at the value's line.
[[noreturn]] void fail_at(const std::string& where, const std::string& message);

[[noreturn]] void fail_type(const Entry& e, const YAML::Node& n, std::string_view must,
                            const std::string& name = "");

// A mapping key as text. YAML allows a list or a mapping as a key (`[a, b]: 1`), where yaml-cpp's
// as<std::string> throws its own exception (found by fuzz/fuzz_train_config); keys are names.
std::string key_name(const YAML::Node& key, const std::string& where, const std::string& of);

// Scalars are read with YAML's core-schema rules (quoted numbers are accepted, as pydantic does
// for axolotl).

// Whether a key holds a value: not null, false, empty text or an empty list/mapping.
bool is_set(const YAML::Node& n);

// libstdc++'s std::regex matches by recursion, frames per character: a 50,000-digit lora_r
// overflowed the stack. Longer text is never a number, a duration or a plain word.
constexpr size_t kMaxRegexText = 256;

int64_t read_int(const Entry& e, std::string_view must, int64_t lo, int64_t hi = kMaxInt);

// A YAML float as axolotl's pydantic takes one: finite, decimal or exponent notation.
bool parse_float(const std::string& text, double& out);

template <typename InRange>
double read_float(const Entry& e, std::string_view must, InRange in_range) {
  double v = 0;
  if (!e.value.IsScalar() || !parse_float(e.value.Scalar(), v) || !in_range(v))
    fail_type(e, e.value, must);
  return v;
}

bool read_bool(const Entry& e);

// The offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos. The resolved config is written out as JSON, which
// holds UTF-8 only (found by fuzz/fuzz_train_config).
size_t invalid_utf8_at(std::string_view s);

std::string read_string(const Entry& e, const YAML::Node& n, const std::string& name = "");

template <typename Enum, size_t N>
Enum read_enum(const Entry& e, const YAML::Node& n,
               const std::array<std::pair<std::string_view, Enum>, N>& names,
               const std::string& name = "") {
  std::string valid;
  for (const auto& [s, v] : names) valid += (valid.empty() ? "" : ", ") + std::string(s);
  if (n.IsScalar())
    for (const auto& [s, v] : names)
      if (s == n.Scalar()) return v;
  std::string msg =
      "'" + (name.empty() ? e.key : name) + "' must be one of " + valid + ", got " + got(n);
  if (n.IsScalar()) {
    std::vector<std::string_view> words;
    for (const auto& [s, v] : names) words.push_back(s);
    const std::string guess = closest(n.Scalar(), words);
    if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
  }
  fail_at(e.where(n), msg);
}

template <typename Enum, size_t N>
std::string_view name_of(Enum v, const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [s, x] : names)
    if (x == v) return s;
  throw Internal("train_config: enum value without a name");
}

}  // namespace medtune::train::config
