// The values a chat template computes with, modelled on the Python objects jinja2 hands around:
// Undefined, None, bool, int, float, str, list, dict, namespace() and callables (macros,
// builtins, bound string/dict methods). Printing, truthiness and equality follow Python so a
// rendered prompt matches transformers' apply_chat_template byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace medtune::tokenizer::jinja {

// A failure while evaluating, without a location: builtins throw it and the evaluator, which
// knows the node being evaluated, turns it into a BadInput naming origin, line and column.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
};

// The template itself called raise_exception(msg): the message is the template author's.
class TemplateRaised : public EvalError {
 public:
  explicit TemplateRaised(const std::string& what) : EvalError(what) {}
};

class Value;
using List = std::vector<Value>;

// Insertion-ordered like a Python dict: tojson, items() and printing keep the key order.
// Chat-template dicts are small, so a linear search beats hashing.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// jinja2's namespace(): the one mutable object, so `{% set ns.x = ... %}` inside a loop is seen
// after it. Shared by reference like the Python object.
struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

// What an undefined value remembers, so a later misuse can say what was missing
// ("'x' is undefined", "'dict object' has no attribute 'tools'") as jinja2 does.
struct Undefined {
  std::string hint;
};

class Value {
 public:
  Value() : v_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(nullptr); }
  Value(bool b) : v_(b) {}                      // NOLINT: implicit like a literal
  Value(std::int64_t i) : v_(i) {}              // NOLINT
  Value(int i) : v_(static_cast<std::int64_t>(i)) {}  // NOLINT
  Value(double d) : v_(d) {}                    // NOLINT
  Value(std::string s) : v_(std::move(s)) {}    // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(List l) : v_(std::make_shared<const List>(std::move(l))) {}  // NOLINT
  Value(Dict d) : v_(std::make_shared<const Dict>(std::move(d))) {}  // NOLINT
  Value(std::shared_ptr<Namespace> ns) : v_(std::move(ns)) {}        // NOLINT
  Value(std::shared_ptr<const Callable> fn) : v_(std::move(fn)) {}   // NOLINT

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  // Python's bool is an int: True + 1 == 2, True == 1.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(v_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const;  // int or bool
  double as_double() const;     // int, bool or float
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // Python's type name, for messages: "str", "int", "list", "dict", ...
  std::string type_name() const;
  // Python truthiness: empty string/list/dict, 0, None and Undefined are false.
  bool truthy() const;
  // str(value) as jinja2 prints it: None -> "None", True -> "True", 1.0 -> "1.0",
  // lists and dicts as Python reprs. Undefined prints as "".
  std::string str() const;
  // repr(value): strings quoted the way Python quotes them.
  std::string repr() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(std::nullptr_t) : v_(nullptr) {}
  std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, std::string,
               std::shared_ptr<const List>, std::shared_ptr<const Dict>,
               std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>
      v_;
};

// Python ==: 1 == 1.0 == True, lists and dicts compared deeply; Undefined equals Undefined.
bool equals(const Value& a, const Value& b);
// Python <; throws EvalError for types Python cannot order ("'<' not supported ...").
bool less_than(const Value& a, const Value& b);
// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double d);

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys),
// so separators are ", " and ": " without indent and "," and ": " with it.
struct JsonOptions {
  int indent = -1;  // < 0: no indent (single line)
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace medtune::tokenizer::jinja
