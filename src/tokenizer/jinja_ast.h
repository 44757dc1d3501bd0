// The parsed form of a chat template: expressions and statements, each with the location it
// came from so evaluation errors can point into the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace medtune::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // args = items
    tuple,      // args = items (printed like a list; templates only unpack tuples)
    dict,       // kwargs-like pairs in dict_items
    attribute,  // args[0].name
    item,       // args[0][args[1]]
    slice,      // args[0][args[1]:args[2]:args[3]] (null parts are omitted bounds)
    call,       // args[0](args[1..], kwargs)
    filter,     // args[0] | name(args[1..], kwargs)
    test,       // args[0] is name(args[1..]); negated: `is not`
    not_,       // not args[0]
    negate,     // -args[0]
    plus,       // +args[0]
    binary,     // args[0] op args[1]: + - * / // % ** ~
    compare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    and_,
    or_,
    conditional,  // args[1] if args[0] else args[2] (args[2] may be null: undefined)
  };
  Kind kind = Kind::literal;
  Location where;
  Value value;       // literal
  std::string name;  // name, attribute, filter, test; operator of binary
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  std::vector<std::string> ops;  // compare
  bool negated = false;          // test
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    text,        // text
    output,      // {{ expr }}
    if_,         // branches (condition, body); a null condition is the else branch
    for_,        // targets in expr [if condition]: body [else else_body]
    set,         // targets = expr, or attribute: targets[0].attribute = expr
    set_block,   // {% set targets[0] %}body{% endset %} [with filters in filter_chain]
    macro,       // {% macro name(params) %}body{% endmacro %}
    break_,
    continue_,
    filter_block,  // {% filter f %}body{% endfilter %}: filter_chain applied to the body
    scope,         // a body rendered in place: {% generation %} of transformers
  };
  Kind kind = Kind::text;
  Location where;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
  // A chain of filters applied to a value that stands in for the literal placeholder expression
  // at its root (set_block and filter_block).
  ExprPtr filter_chain;
};

}  // namespace medtune::tokenizer::jinja
