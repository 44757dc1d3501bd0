// The filters, tests, methods and global functions chat templates call, with the behaviour of
// jinja2 3.1 inside transformers' sandbox (its own tojson, raise_exception, strftime_now,
// namespace and dict). Builtins throw EvalError; the evaluator adds the template location.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace medtune::tokenizer::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args);

// value.name as jinja2's sandboxed getattr resolves it: methods of str and dict (bound to the
// value), dict keys, namespace attributes; otherwise Undefined (an error only when used).
Value get_attribute(const Value& value, const std::string& name);
// value[key]: list/str indices (negative from the end), dict keys, namespace attributes.
Value get_item(const Value& value, const Value& key);
// value[start:stop:step] for lists and strings (code points), with Python's slice rules.
Value get_slice(const Value& value, const Value& start, const Value& stop, const Value& step);

// The globals transformers gives every chat template: range, namespace, dict,
// raise_exception, strftime_now.
Dict make_globals();

// Converts a value to a list the way Python's list(x) does (str: characters, dict: keys).
List to_list(const Value& value);

}  // namespace medtune::tokenizer::jinja
