#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "tokenizer/jinja_text.h"

namespace medtune::tokenizer::jinja {

namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

constexpr std::string_view kFilters[] = {
    "trim", "length", "count", "upper", "lower", "capitalize", "title", "tojson", "default", "d",
    "join", "first", "last", "string", "list", "items", "replace", "int", "float", "abs", "round",
    "select", "reject", "selectattr", "rejectattr", "map", "unique", "sort", "reverse", "safe",
    "escape", "e", "indent", "attr", "min", "max", "sum", "dictsort", "batch", "wordcount",
    "center", "striptags", "truncate"};
// Listed in kFilters only so that parsing accepts templates that name them in branches never
// taken; implemented below except those in kDeclaredOnly.
constexpr std::string_view kDeclaredOnly[] = {"batch", "wordcount", "center",
                                              "striptags", "truncate"};

constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true",
    "false", "mapping", "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=",
    "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "sameas",
    "lower", "upper"};

template <std::size_t N>
bool in_list(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// Binds Python-style (positional, keyword) arguments to named parameters with defaults.
class Args {
 public:
  Args(const std::string& fn, const CallArgs& args, std::vector<std::string> names)
      : fn_(fn), names_(std::move(names)), values_(names_.size()) {
    if (args.positional.size() > names_.size()) {
      throw EvalError(fn + "() takes at most " + std::to_string(names_.size()) + " argument(s)");
    }
    for (std::size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i];
    for (const auto& [k, v] : args.keyword) {
      const auto it = std::find(names_.begin(), names_.end(), k);
      if (it == names_.end()) throw EvalError(fn + "() got an unexpected keyword argument '" + k + "'");
      values_[static_cast<std::size_t>(it - names_.begin())] = v;
    }
  }
  bool has(std::size_t i) const { return !values_[i].is_undefined(); }
  const Value& get(std::size_t i) const { return values_[i]; }
  Value get_or(std::size_t i, Value fallback) const { return has(i) ? values_[i] : fallback; }
  std::int64_t get_int(std::size_t i, std::int64_t fallback) const {
    if (!has(i) || values_[i].is_none()) return fallback;
    if (!values_[i].is_int() && !values_[i].is_bool()) {
      throw EvalError(fn_ + "(): '" + names_[i] + "' must be an integer");
    }
    return values_[i].as_int();
  }
  std::string get_string(std::size_t i, const std::string& fallback) const {
    return has(i) ? values_[i].str() : fallback;
  }

 private:
  std::string fn_;
  std::vector<std::string> names_;
  std::vector<Value> values_;
};

std::int64_t length_of(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<std::int64_t>(utf8_length(v.as_string()));
  if (v.is_list()) return static_cast<std::int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict().entries.size());
  throw EvalError("object of type '" + v.type_name() + "' has no len()");
}

Value make_method(const std::string& name, std::function<Value(const CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->call = std::move(fn);
  return Value(std::shared_ptr<const Callable>(std::move(c)));
}

std::optional<std::string> optional_string(const Args& a, std::size_t i) {
  if (!a.has(i) || a.get(i).is_none()) return std::nullopt;
  if (!a.get(i).is_string()) throw EvalError("expected a string argument");
  return a.get(i).as_string();
}

// startswith/endswith accept a string or a tuple (list) of strings.
bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw EvalError("startswith/endswith argument must be str or a tuple of str");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& v : affix.as_list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(affix);
}

template <class Pred>
bool all_code_points(const std::string& s, Pred pred) {
  const auto cps = utf8_decode(s);
  if (cps.empty()) return false;
  for (char32_t cp : cps) {
    if (!pred(cp)) return false;
  }
  return true;
}

bool case_check(const std::string& s, bool want_lower) {
  bool any_cased = false;
  for (char32_t cp : utf8_decode(s)) {
    if (!is_cased_letter(cp)) continue;
    any_cased = true;
    const bool lower = to_upper_cp(cp) != cp || cp == 0xDF;
    if (lower != want_lower) return false;
  }
  return any_cased;
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) { return make_method(name, [s, name, fn](const CallArgs& c) { return fn(s, name, c); }); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"chars"});
      return Value(py_strip(str, optional_string(a, 0), n != "rstrip", n != "lstrip"));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"prefix"});
      if (!a.has(0)) throw EvalError(n + "() takes at least 1 argument");
      return Value(affix_matches(str, a.get(0), n == "startswith"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"sep", "maxsplit"});
      const std::int64_t maxsplit = a.get_int(1, -1);
      if (n == "rsplit" && maxsplit >= 0) throw EvalError("unsupported method 'rsplit' with maxsplit");
      List out;
      for (auto& part : py_split(str, optional_string(a, 0), maxsplit)) out.emplace_back(std::move(part));
      return Value(std::move(out));
    });
  }
  if (name == "splitlines") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"keepends"});
      const bool keep = a.get_or(0, Value(false)).truthy();
      List out;
      std::size_t start = 0;
      for (std::size_t i = 0; i < str.size(); ++i) {
        if (str[i] != '\n' && str[i] != '\r') continue;
        std::size_t end = i;
        if (str[i] == '\r' && i + 1 < str.size() && str[i + 1] == '\n') ++i;
        out.emplace_back(str.substr(start, (keep ? i + 1 : end) - start));
        start = i + 1;
      }
      if (start < str.size()) out.emplace_back(str.substr(start));
      return Value(std::move(out));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {});
      if (n == "upper") return Value(py_upper(str));
      if (n == "lower") return Value(py_lower(str));
      if (n == "title") return Value(py_title(str));
      return Value(py_capitalize(str));
    });
  }
  if (name == "replace") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"old", "new", "count"});
      if (!a.has(0) || !a.has(1)) throw EvalError("replace() takes at least 2 arguments");
      return Value(py_replace(str, a.get(0).str(), a.get(1).str(), a.get_int(2, -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"sub"});
      const std::string sub = a.get_string(0, "");
      if (n == "count") {
        if (sub.empty()) return Value(static_cast<std::int64_t>(utf8_length(str)) + 1);
        std::int64_t k = 0;
        for (std::size_t p = str.find(sub); p != std::string::npos; p = str.find(sub, p + sub.size())) ++k;
        return Value(k);
      }
      const std::size_t p = n == "find" ? str.find(sub) : str.rfind(sub);
      if (p == std::string::npos) return Value(-1);
      return Value(static_cast<std::int64_t>(utf8_length(std::string_view(str).substr(0, p))));
    });
  }
  if (name == "join") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {"iterable"});
      std::string out;
      bool first = true;
      for (const Value& v : to_list(a.get(0))) {
        if (!v.is_string()) throw EvalError("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += str;
        out += v.as_string();
        first = false;
      }
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
      name == "islower" || name == "isupper") {
    return bind([](const std::string& str, const std::string& n, const CallArgs& c) {
      const Args a(n, c, {});
      if (n == "isdigit") return Value(all_code_points(str, [](char32_t cp) { return cp >= '0' && cp <= '9'; }));
      if (n == "isspace") return Value(all_code_points(str, is_python_space));
      if (n == "isalpha") return Value(all_code_points(str, is_cased_letter));
      if (n == "isalnum") {
        return Value(all_code_points(str, [](char32_t cp) { return is_cased_letter(cp) || (cp >= '0' && cp <= '9'); }));
      }
      return Value(case_check(str, n == "islower"));
    });
  }
  static const std::string_view kOtherStrMethods[] = {
      "format", "format_map", "center", "ljust", "rjust", "zfill", "partition", "rpartition",
      "index", "rindex", "encode", "expandtabs", "casefold", "swapcase", "translate",
      "maketrans", "istitle", "isdecimal", "isnumeric", "isidentifier", "isprintable",
      "isascii", "removeprefix", "removesuffix"};
  if (in_list(kOtherStrMethods, name)) {
    return make_method(name, [name](const CallArgs&) -> Value {
      throw EvalError("unsupported method 'str." + name + "'");
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

List items_of(const Dict& d) {
  List out;
  for (const auto& [k, v] : d.entries) out.emplace_back(List{Value(k), v});
  return out;
}

Value dict_method(const Value& dict, const std::string& name) {
  const Dict& d = dict.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    return make_method(name, [dict, name](const CallArgs& c) {
      const Args a(name, c, {});
      if (name == "items") return Value(items_of(dict.as_dict()));
      List out;
      for (const auto& [k, v] : dict.as_dict().entries) out.push_back(name == "keys" ? Value(k) : v);
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return make_method(name, [dict](const CallArgs& c) {
      const Args a("get", c, {"key", "default"});
      const Value* v = a.get(0).is_string() ? dict.as_dict().find(a.get(0).as_string()) : nullptr;
      return v != nullptr ? *v : a.get_or(1, Value::none());
    });
  }
  static const std::string_view kOtherDictMethods[] = {"update", "pop", "popitem", "setdefault",
                                                      "clear", "copy", "fromkeys"};
  if (in_list(kOtherDictMethods, name)) {
    return make_method(name, [name](const CallArgs&) -> Value {
      throw EvalError("unsupported method 'dict." + name + "' (dicts are immutable in chat templates)");
    });
  }
  if (const Value* v = d.find(name)) return *v;
  return Value::undefined("'dict object' has no attribute '" + name + "'");
}

Value list_method(const std::string& name) {
  static const std::string_view kListMethods[] = {"append", "extend", "insert", "pop", "remove",
                                                  "clear", "sort", "reverse", "copy", "index",
                                                  "count"};
  if (in_list(kListMethods, name)) {
    return make_method(name, [name](const CallArgs&) -> Value {
      throw EvalError("unsupported method 'list." + name + "' (lists are immutable in chat templates)");
    });
  }
  return Value::undefined("'list object' has no attribute '" + name + "'");
}

std::string object_name(const Value& v) { return v.type_name() + " object"; }

// ---- filters ----

Value filter_tojson(const Value& v, const CallArgs& c) {
  const Args a("tojson", c, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a.get_or(0, Value(false)).truthy();
  if (a.has(1) && !a.get(1).is_none()) {
    o.indent = static_cast<int>(a.get_int(1, -1));
    o.item_separator = ",";
  }
  if (a.has(2) && !a.get(2).is_none()) {
    const Value& sep = a.get(2);
    if (!sep.is_list() || sep.as_list().size() != 2) throw EvalError("tojson(): separators must be a pair");
    o.item_separator = sep.as_list()[0].str();
    o.key_separator = sep.as_list()[1].str();
  }
  o.sort_keys = a.get_or(3, Value(false)).truthy();
  return Value(to_json(v, o));
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (v.is_undefined()) return v;
    v = numeric ? get_item(v, Value(static_cast<std::int64_t>(std::atoll(part.c_str())))) : get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// select/reject/selectattr/rejectattr: keep items whose test (or truthiness) is `want`.
Value filter_select(const std::string& name, const Value& seq, const CallArgs& c) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool want = name == "select" || name == "selectattr";
  std::size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (c.positional.empty()) throw EvalError(name + "() needs an attribute name");
    attr = c.positional[next++].str();
  }
  std::string test;
  std::vector<Value> test_args;
  if (next < c.positional.size()) {
    test = c.positional[next++].str();
    if (!is_known_test(test)) throw EvalError("unsupported test '" + test + "'");
    test_args.assign(c.positional.begin() + static_cast<std::ptrdiff_t>(next), c.positional.end());
  }
  List out;
  for (const Value& item : to_list(seq)) {
    const Value probe = by_attr ? attribute_path(item, attr) : item;
    const bool ok = test.empty() ? probe.truthy() : apply_test(test, probe, test_args);
    if (ok == want) out.push_back(item);
  }
  return Value(std::move(out));
}

Value filter_map(const Value& seq, const CallArgs& c) {
  List out;
  const List items = to_list(seq);
  for (const auto& [k, v] : c.keyword) {
    if (k != "attribute" && k != "default") throw EvalError("map() got an unexpected keyword argument '" + k + "'");
  }
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, v] : c.keyword) (k == "attribute" ? attribute : fallback) = &v;
  if (attribute != nullptr) {
    for (const Value& item : items) {
      Value v = attribute_path(item, attribute->str());
      if (v.is_undefined() && fallback != nullptr) v = *fallback;
      out.push_back(std::move(v));
    }
    return Value(std::move(out));
  }
  if (c.positional.empty()) throw EvalError("map() needs a filter name or attribute=");
  const std::string filter = c.positional[0].str();
  if (!is_known_filter(filter)) throw EvalError("unsupported filter '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(c.positional.begin() + 1, c.positional.end());
  for (const Value& item : items) out.push_back(apply_filter(filter, item, rest));
  return Value(std::move(out));
}

Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(py_lower(v.as_string())) : v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

Value filter_indent(const Value& v, const CallArgs& c) {
  const Args a("indent", c, {"width", "first", "blank"});
  const std::string pad = a.has(0) && a.get(0).is_string() ? a.get(0).as_string()
                                                           : std::string(static_cast<std::size_t>(a.get_int(0, 4)), ' ');
  const bool first = a.get_or(1, Value(false)).truthy();
  const bool blank = a.get_or(2, Value(false)).truthy();
  std::string s = v.str();
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t p = s.find('\n'); p != std::string::npos; p = s.find('\n', start)) {
    lines.push_back(s.substr(start, p - start));
    start = p + 1;
  }
  lines.push_back(s.substr(start));
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool indent_this = (i > 0 || first) && (blank || !py_strip(lines[i], std::nullopt, true, true).empty());
    if (indent_this) out += pad;
    out += lines[i];
  }
  return Value(std::move(out));
}

Value number_filter(const std::string& name, const Value& v, const CallArgs& c) {
  if (name == "abs") {
    if (!v.is_number()) throw EvalError("bad operand type for abs(): '" + v.type_name() + "'");
    return v.is_float() ? Value(std::fabs(v.as_double())) : Value(static_cast<std::int64_t>(std::llabs(v.as_int())));
  }
  if (name == "round") {
    const Args a("round", c, {"precision", "method"});
    const std::int64_t precision = a.get_int(0, 0);
    const std::string method = a.get_string(1, "common");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    double r;
    if (method == "common") {
      r = std::nearbyint(x);  // Python's round(): halves go to the even neighbour
    } else if (method == "ceil") {
      r = std::ceil(x);
    } else if (method == "floor") {
      r = std::floor(x);
    } else {
      throw EvalError("method must be common, ceil or floor");
    }
    return Value(r / scale);
  }
  if (name == "int") {
    const Args a("int", c, {"default", "base"});
    const Value fallback = a.get_or(0, Value(0));
    if (v.is_number()) return v.is_float() ? Value(static_cast<std::int64_t>(std::trunc(v.as_double()))) : Value(v.as_int());
    if (v.is_string()) {
      const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(a.get_int(1, 10)));
      if (!s.empty() && end != nullptr && *end == '\0') return Value(static_cast<std::int64_t>(i));
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end != nullptr && *end == '\0') return Value(static_cast<std::int64_t>(std::trunc(d)));
    }
    return fallback;
  }
  // float
  const Args a("float", c, {"default"});
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end != nullptr && *end == '\0') return Value(d);
  }
  return a.get_or(0, Value(0.0));
}

Value sequence_filter(const std::string& name, const Value& v, const CallArgs& c) {
  if (name == "first" || name == "last") {
    const List items = to_list(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(to_list(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = utf8_decode(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(utf8_encode(cps));
    }
    List items = to_list(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max") {
    const bool sorting = name == "sort";
    const Args a(name, c, sorting ? std::vector<std::string>{"reverse", "case_sensitive", "attribute"}
                                  : std::vector<std::string>{"case_sensitive", "attribute"});
    const bool reverse = sorting && a.get_or(0, Value(false)).truthy();
    const bool case_sensitive = a.get_or(sorting ? 1 : 0, Value(false)).truthy();
    const Value attribute = a.get_or(sorting ? 2 : 1, Value::none());
    auto key = [&](const Value& item) {
      return sort_key(attribute.is_none() ? item : attribute_path(item, attribute.str()), case_sensitive);
    };
    List items = to_list(v);
    if (name == "unique") {
      List out;
      std::vector<Value> seen;
      for (const Value& item : items) {
        const Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value(std::move(out));
    }
    if (name == "sort") {
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
      });
      return Value(std::move(items));
    }
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    Value best = items[0];
    for (const Value& item : items) {
      if (name == "min" ? less_than(key(item), key(best)) : less_than(key(best), key(item))) best = item;
    }
    return best;
  }
  // sum
  const Args a("sum", c, {"attribute", "start"});
  Value total = a.get_or(1, Value(0));
  for (const Value& item : to_list(v)) {
    const Value x = a.has(0) ? attribute_path(item, a.get(0).str()) : item;
    if (!x.is_number() || !total.is_number()) throw EvalError("sum() of non-numbers");
    total = (x.is_float() || total.is_float()) ? Value(total.as_double() + x.as_double())
                                               : Value(total.as_int() + x.as_int());
  }
  return total;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return in_list(kFilters, name) && !in_list(kDeclaredOnly, name);
}

bool is_known_test(std::string_view name) { return in_list(kTests, name); }

List to_list(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list();
  if (v.is_string()) {
    List out;
    std::string cp;
    for (char32_t c : utf8_decode(v.as_string())) {
      cp.clear();
      utf8_append(cp, c);
      out.emplace_back(cp);
    }
    return out;
  }
  if (v.is_dict()) {
    List out;
    for (const auto& [k, x] : v.as_dict().entries) out.emplace_back(k);
    return out;
  }
  throw EvalError("'" + v.type_name() + "' object is not iterable");
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& c) {
  if (name == "default" || name == "d") {
    const Args a(name, c, {"default_value", "boolean"});
    const bool boolean = a.get_or(1, Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get_or(0, Value(""));
    return v;
  }
  if (name == "trim") {
    const Args a(name, c, {"chars"});
    return Value(py_strip(v.str(), optional_string(a, 0), true, true));
  }
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "upper") return Value(py_upper(v.str()));
  if (name == "lower") return Value(py_lower(v.str()));
  if (name == "capitalize") return Value(py_capitalize(v.str()));
  if (name == "title") return Value(py_title(v.str()));
  if (name == "string") return Value(v.str());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value(html_escape(v.str()));
  if (name == "tojson") return filter_tojson(v, c);
  if (name == "join") {
    const Args a(name, c, {"d", "attribute"});
    const std::string sep = a.get_string(0, "");
    std::string out;
    bool first = true;
    for (const Value& item : to_list(v)) {
      if (!first) out += sep;
      out += (a.has(1) ? attribute_path(item, a.get(1).str()) : item).str();
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
    return Value(items_of(v.as_dict()));
  }
  if (name == "replace") {
    const Args a(name, c, {"old", "new", "count"});
    return Value(py_replace(v.str(), a.get_string(0, ""), a.get_string(1, ""), a.get_int(2, -1)));
  }
  if (name == "attr") {
    const Args a(name, c, {"name"});
    if (v.is_undefined()) throw EvalError(v.undefined_hint());
    return get_attribute(v, a.get_string(0, ""));
  }
  if (name == "dictsort") {
    const Args a(name, c, {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) throw EvalError("dictsort(): value must be a dict");
    const bool case_sensitive = a.get_or(0, Value(false)).truthy();
    const std::size_t by = a.get_string(1, "key") == "value" ? 1 : 0;
    const bool reverse = a.get_or(2, Value(false)).truthy();
    List pairs = items_of(v.as_dict());
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      const Value kx = sort_key(x.as_list()[by], case_sensitive);
      const Value ky = sort_key(y.as_list()[by], case_sensitive);
      return reverse ? less_than(ky, kx) : less_than(kx, ky);
    });
    return Value(std::move(pairs));
  }
  if (name == "indent") return filter_indent(v, c);
  if (name == "abs" || name == "round" || name == "int" || name == "float") {
    return number_filter(name, v, c);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return filter_select(name, v, c);
  }
  if (name == "map") return filter_map(v, c);
  if (name == "first" || name == "last" || name == "list" || name == "reverse" || name == "unique" ||
      name == "sort" || name == "min" || name == "max" || name == "sum") {
    return sequence_filter(name, v, c);
  }
  throw EvalError("unsupported filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  auto arg = [&]() -> const Value& {
    if (args.empty()) throw EvalError("test '" + name + "' needs an argument");
    return args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "<") return less_than(v, arg());
  if (name == "le" || name == "<=") return less_than(v, arg()) || equals(v, arg());
  if (name == "gt" || name == ">") return less_than(arg(), v);
  if (name == "ge" || name == ">=") return less_than(arg(), v) || equals(v, arg());
  if (name == "in") {
    const Value& seq = arg();
    if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
    for (const Value& item : to_list(seq)) {
      if (equals(item, v)) return true;
    }
    return false;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) throw EvalError("test '" + name + "' needs an integer");
    const std::int64_t n = v.as_int();
    if (name == "odd") return n % 2 != 0;
    if (name == "even") return n % 2 == 0;
    const Value& d = arg();
    if (!d.is_int() || d.as_int() == 0) throw EvalError("divisibleby needs a non-zero integer");
    return n % d.as_int() == 0;
  }
  if (name == "sameas") {
    // Python identity: meaningful for None, True and False, the singletons templates compare.
    const Value& o = arg();
    if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
    if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
    return false;
  }
  if (name == "lower" || name == "upper") return case_check(v.str(), name == "lower");
  throw EvalError("unsupported test '" + name + "'");
}

Value get_attribute(const Value& v, const std::string& name) {
  if (v.is_string()) return string_method(v.as_string(), name);
  if (v.is_dict()) return dict_method(v, name);
  if (v.is_list()) return list_method(name);
  if (v.is_namespace()) {
    if (const Value* x = v.as_namespace().attrs.find(name)) return *x;
    return Value::undefined("'Namespace object' has no attribute '" + name + "'");
  }
  return Value::undefined("'" + object_name(v) + "' has no attribute '" + name + "'");
}

Value get_item(const Value& v, const Value& key) {
  if (v.is_list() || v.is_string()) {
    if (key.is_string()) return get_attribute(v, key.as_string());
    if (!key.is_int() && !key.is_bool()) {
      throw EvalError("indices must be integers or slices, not " + key.type_name());
    }
    std::int64_t i = key.as_int();
    if (v.is_list()) {
      const auto n = static_cast<std::int64_t>(v.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'list object' has no element " + std::to_string(key.as_int()));
      return v.as_list()[static_cast<std::size_t>(i)];
    }
    const auto cps = utf8_decode(v.as_string());
    const auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
    std::string out;
    utf8_append(out, cps[static_cast<std::size_t>(i)]);
    return Value(std::move(out));
  }
  if (v.is_dict()) {
    if (key.is_string()) {
      if (const Value* x = v.as_dict().find(key.as_string())) return *x;
      return dict_method(v, key.as_string());
    }
    return Value::undefined("'dict object' has no element " + key.str());
  }
  if (key.is_string()) return get_attribute(v, key.as_string());
  return Value::undefined("'" + object_name(v) + "' has no element " + key.str());
}

Value get_slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [](const Value& x, const char* what) -> std::optional<std::int64_t> {
    if (x.is_none()) return std::nullopt;
    if (!x.is_int() && !x.is_bool()) throw EvalError(std::string("slice ") + what + " must be an integer or None");
    return x.as_int();
  };
  const auto st = as_index(step, "step");
  const std::int64_t s = st.value_or(1);
  if (s == 0) throw EvalError("slice step cannot be zero");
  std::vector<char32_t> cps;
  const bool is_str = v.is_string();
  if (!is_str && !v.is_list()) throw EvalError("'" + v.type_name() + "' object is not subscriptable");
  if (is_str) cps = utf8_decode(v.as_string());
  const auto n = static_cast<std::int64_t>(is_str ? cps.size() : v.as_list().size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<std::int64_t> x, std::int64_t fallback) {
    if (!x) return fallback;
    std::int64_t i = *x;
    if (i < 0) {
      i += n;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= n) {
      i = s < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t b = adjust(as_index(start, "start"), s < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(as_index(stop, "stop"), s < 0 ? -1 : n);
  std::vector<std::size_t> picks;
  for (std::int64_t i = b; s > 0 ? i < e : i > e; i += s) picks.push_back(static_cast<std::size_t>(i));
  if (is_str) {
    std::string out;
    for (std::size_t i : picks) utf8_append(out, cps[i]);
    return Value(std::move(out));
  }
  List out;
  for (std::size_t i : picks) out.push_back(v.as_list()[i]);
  return Value(std::move(out));
}

Dict make_globals() {
  Dict g;
  g.set("range", make_method("range", [](const CallArgs& c) {
          if (!c.keyword.empty() || c.positional.empty() || c.positional.size() > 3) {
            throw EvalError("range() takes 1 to 3 integer arguments");
          }
          std::vector<std::int64_t> a;
          for (const Value& v : c.positional) {
            if (!v.is_int() && !v.is_bool()) throw EvalError("range() arguments must be integers");
            a.push_back(v.as_int());
          }
          const std::int64_t start = a.size() == 1 ? 0 : a[0];
          const std::int64_t stop = a.size() == 1 ? a[0] : a[1];
          const std::int64_t step = a.size() == 3 ? a[2] : 1;
          if (step == 0) throw EvalError("range() arg 3 must not be zero");
          List out;
          for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (static_cast<std::int64_t>(out.size()) >= kMaxRange) {
              throw EvalError("range too big, the sandbox blocks ranges larger than MAX_RANGE (100000)");
            }
            out.emplace_back(i);
          }
          return Value(std::move(out));
        }));
  g.set("namespace", make_method("namespace", [](const CallArgs& c) {
          auto ns = std::make_shared<Namespace>();
          for (const Value& v : c.positional) {
            if (!v.is_dict()) throw EvalError("namespace() positional argument must be a dict");
            for (const auto& [k, x] : v.as_dict().entries) ns->attrs.set(k, x);
          }
          for (const auto& [k, x] : c.keyword) {
            if (!k.empty() && k[0] == '_') throw EvalError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'.");
            ns->attrs.set(k, x);
          }
          return Value(std::move(ns));
        }));
  g.set("dict", make_method("dict", [](const CallArgs& c) {
          Dict d;
          for (const Value& v : c.positional) {
            if (!v.is_dict()) throw EvalError("dict() positional argument must be a dict");
            for (const auto& [k, x] : v.as_dict().entries) d.set(k, x);
          }
          for (const auto& [k, x] : c.keyword) d.set(k, x);
          return Value(std::move(d));
        }));
  g.set("raise_exception", make_method("raise_exception", [](const CallArgs& c) -> Value {
          throw TemplateRaised(c.positional.empty() ? std::string() : c.positional[0].str());
        }));
  g.set("strftime_now", make_method("strftime_now", [](const CallArgs& c) {
          const Args a("strftime_now", c, {"format"});
          const std::string fmt = a.get_string(0, "");
          const std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          std::string out(256, '\0');
          // The format is the template's, like Python's datetime.strftime(format).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
          const std::size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &local);
#pragma GCC diagnostic pop
          out.resize(n);
          return Value(std::move(out));
        }));
  return g;
}

}  // namespace medtune::tokenizer::jinja
