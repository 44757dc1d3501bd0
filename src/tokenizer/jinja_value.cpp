#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_text.h"

namespace medtune::tokenizer::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

std::int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<std::int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  if (is_namespace()) return "Namespace";
  return "function";
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().entries.empty();
  return true;
}

namespace {

std::string quote_python(const std::string& s) {
  // Python prefers single quotes and switches to double quotes only when that avoids escaping.
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += q;
  return out;
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E && cp < 0x10000)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else if (ensure_ascii && cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(o.indent) * static_cast<std::size_t>(lvl), ' ');
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_double();
    if (std::isnan(d)) {
      out += "NaN";
    } else if (std::isinf(d)) {
      out += d > 0 ? "Infinity" : "-Infinity";
    } else {
      out += format_float(d);
    }
  } else if (v.is_string()) {
    json_string(out, v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    const List& l = v.as_list();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (i > 0) out += o.item_separator;
      newline(level + 1);
      json_value(out, l[i], o, level + 1);
    }
    newline(level);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : v.as_dict().entries) entries.push_back(&e);
    if (entries.empty()) {
      out += "{}";
      return;
    }
    if (o.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += o.item_separator;
      newline(level + 1);
      json_string(out, entries[i]->first, o.ensure_ascii);
      out += o.key_separator;
      json_value(out, entries[i]->second, o, level + 1);
    }
    newline(level);
    out += '}';
  } else {
    throw EvalError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return format_float(as_double());
  if (is_list()) {
    std::string out = "[";
    const List& l = as_list();
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (i > 0) out += ", ";
      out += l[i].repr();
    }
    return out + "]";
  }
  if (is_dict() || is_namespace()) {
    const Dict& d = is_dict() ? as_dict() : as_namespace().attrs;
    std::string out = "{";
    for (std::size_t i = 0; i < d.entries.size(); ++i) {
      if (i > 0) out += ", ";
      out += quote_python(d.entries[i].first) + ": " + d.entries[i].second.repr();
    }
    out += "}";
    return is_dict() ? out : "<Namespace " + out + ">";
  }
  return "<function " + as_callable().name + ">";
}

std::string Value::repr() const {
  if (is_string()) return quote_python(as_string());
  if (is_undefined()) return "Undefined";
  return str();
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then laid out the way Python's repr() does: positional for
  // exponents in [-4, 16), scientific with a two-digit exponent otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const std::size_t epos = sci.find('e');
  std::string mantissa = sci.substr(0, epos);
  const int exponent = std::stoi(sci.substr(epos + 1));
  bool negative = false;
  if (!mantissa.empty() && mantissa[0] == '-') {
    negative = true;
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const auto point = static_cast<std::size_t>(exponent) + 1;
      if (digits.size() <= point) {
        out += digits;
        out.append(point - digits.size(), '0');
        out += ".0";
      } else {
        out.append(digits, 0, point);
        out += '.';
        out.append(digits, point, std::string::npos);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    // Appended piecewise: GCC 12 raises a false -Wrestrict on `"." + digits.substr(1)` at -O2+.
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + ebuf;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!equals(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (x.entries.size() != y.entries.size()) return false;
    for (const auto& [k, v] : x.entries) {
      const Value* other = y.find(k);
      if (other == nullptr || !equals(v, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.as_namespace() == &b.as_namespace();
  if (a.is_callable() && b.is_callable()) return &a.as_callable() == &b.as_callable();
  return false;
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  // UTF-8 byte order is code point order, which is how Python compares str.
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw EvalError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

}  // namespace medtune::tokenizer::jinja
