#include "train/config_value.h"

#include <charconv>
#include <cmath>

#include "core/std_regex.h"

namespace medtune::train::config {

std::string got(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

[[noreturn]] void fail_at(const std::string& where, const std::string& message) {
  throw BadInput(where + ": " + message);
}

[[noreturn]] void fail_type(const Entry& e, const YAML::Node& n, std::string_view must,
                            const std::string& name) {
  fail_at(e.where(n), "'" + (name.empty() ? e.key : name) + "' must be " + std::string(must) +
                          ", got " + got(n));
}

std::string key_name(const YAML::Node& key, const std::string& where, const std::string& of) {
  if (key.IsSequence() || key.IsMap())
    fail_at(where, "a key of " + of + " must be a name, got " + got(key));
  return key.as<std::string>();
}

bool is_set(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return false;
  if (n.IsScalar()) {
    bool b = true;
    if (YAML::convert<bool>::decode(n, b) && !b) return false;
    return !n.Scalar().empty();
  }
  return n.size() > 0;
}

int64_t read_int(const Entry& e, std::string_view must, int64_t lo, int64_t hi) {
  const YAML::Node& n = e.value;
  static const std::regex kInt("[-+]?[0-9]+");
  if (!n.IsScalar() || n.Scalar().size() > kMaxRegexText || !std::regex_match(n.Scalar(), kInt))
    fail_type(e, n, must);
  std::string_view s = n.Scalar();
  if (s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) fail_type(e, n, must);
  return v;
}

bool parse_float(const std::string& text, double& out) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text.size() > kMaxRegexText || !std::regex_match(text, kFloat)) return false;
  std::string_view s = text;
  if (s.front() == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out);
}

bool read_bool(const Entry& e) {
  bool b = false;
  if (!e.value.IsScalar() || !YAML::convert<bool>::decode(e.value, b))
    fail_type(e, e.value, "true or false");
  return b;
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b >= 0xE0 && b <= 0xEF)
      len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
      len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else if (b >= 0x80)
      return i;
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

std::string read_string(const Entry& e, const YAML::Node& n, const std::string& name) {
  if (!n.IsScalar() || n.Scalar().empty()) fail_type(e, n, "a non-empty string", name);
  if (const size_t bad = invalid_utf8_at(n.Scalar()); bad != std::string_view::npos)
    fail_at(e.where(n), "'" + (name.empty() ? e.key : name) + "' is not valid UTF-8 (byte " +
                            std::to_string(bad + 1) + " of the value)");
  return n.Scalar();
}

}  // namespace medtune::train::config
