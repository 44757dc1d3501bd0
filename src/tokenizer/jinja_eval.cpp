#include "tokenizer/jinja_eval.h"

#include <cmath>
#include <memory>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_text.h"

namespace medtune::tokenizer::jinja {

namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { normal, break_loop, continue_loop };

// Deep enough for any real template's macros, shallow enough to fail before the C++ stack does.
constexpr int kMaxCallDepth = 256;

[[noreturn]] void fail_undefined(const Value& v) { throw EvalError(v.undefined_hint()); }

std::string operand_error(const char* op, const Value& a, const Value& b) {
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() +
         "' and '" + b.type_name() + "'";
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  // `~` converts both sides with str(), and str(Undefined) is "": no error, unlike `+`.
  if (op == "~") return Value(a.str() + b.str());
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && count->is_int()) {
      const std::int64_t n = count->as_int();
      if (seq->is_string()) {
        std::string out;
        for (std::int64_t i = 0; i < n; ++i) out += seq->as_string();
        return Value(std::move(out));
      }
      List out;
      for (std::int64_t i = 0; i < n; ++i) {
        out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
      }
      return Value(std::move(out));
    }
  }
  if (!a.is_number() || !b.is_number()) {
    if (op == "%" && a.is_string()) throw EvalError("unsupported printf-style string formatting ('%')");
    throw EvalError(operand_error(op.c_str(), a, b));
  }
  const bool as_float = a.is_float() || b.is_float() || op == "/";
  if (op == "/" || (as_float && op != "//" && op != "%")) {
    const double x = a.as_double();
    const double y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0.0) throw EvalError("float division by zero");
    return Value(x / y);
  }
  if (as_float) {
    const double x = a.as_double();
    const double y = b.as_double();
    if (y == 0.0) throw EvalError("float modulo");
    const double q = std::floor(x / y);
    return op == "//" ? Value(q) : Value(x - q * y);
  }
  const std::int64_t x = a.as_int();
  const std::int64_t y = b.as_int();
  std::int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) throw EvalError("integer overflow");
    return Value(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) throw EvalError("integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) throw EvalError("integer overflow");
    return Value(r);
  }
  if (op == "**") {
    if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (std::int64_t i = 0; i < y; ++i) {
      if (__builtin_mul_overflow(r, x, &r)) throw EvalError("integer overflow");
    }
    return Value(r);
  }
  if (y == 0) throw EvalError("integer division or modulo by zero");
  // Python floors toward negative infinity; C++ truncates toward zero.
  std::int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return op == "//" ? Value(q) : Value(x - q * y);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;  // iterating Undefined yields nothing
  if (container.is_string()) {
    if (!item.is_string()) {
      throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (equals(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
  if (container.is_namespace()) {
    return item.is_string() && container.as_namespace().attrs.find(item.as_string());
  }
  throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || equals(a, b);
  return less_than(b, a) || equals(a, b);  // ">="
}

class Evaluator {
 public:
  explicit Evaluator(const std::string& origin) : origin_(origin) {}

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& stmt : body) {
      const Flow f = exec_stmt(*stmt, scope, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

 private:
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::text:
        out += s.text;
        return Flow::normal;
      case Stmt::Kind::output:
        out += eval(*s.expr, scope).str();
        return Flow::normal;
      case Stmt::Kind::if_:
        for (const auto& [condition, body] : s.branches) {
          if (!condition || eval(*condition, scope).truthy()) return exec(body, scope, out);
        }
        return Flow::normal;
      case Stmt::Kind::for_:
        exec_for(s, scope, out);
        return Flow::normal;
      case Stmt::Kind::set:
        exec_set(s, scope);
        return Flow::normal;
      case Stmt::Kind::set_block: {
        std::string text;
        exec(s.body, child_of(scope), text);
        Value v(std::move(text));
        if (s.filter_chain) v = eval_chain(*s.filter_chain, std::move(v), scope);
        scope->vars[s.targets[0]] = std::move(v);
        return Flow::normal;
      }
      case Stmt::Kind::macro:
        scope->vars[s.targets[0]] = make_macro(s, scope);
        return Flow::normal;
      case Stmt::Kind::break_:
        return Flow::break_loop;
      case Stmt::Kind::continue_:
        return Flow::continue_loop;
      case Stmt::Kind::filter_block: {
        std::string text;
        exec(s.body, child_of(scope), text);
        out += eval_chain(*s.filter_chain, Value(std::move(text)), scope).str();
        return Flow::normal;
      }
      case Stmt::Kind::scope:
        return exec(s.body, child_of(scope), out);
    }
    return Flow::normal;
  }

  List iterate(const Value& v, Location where) {
    if (v.is_undefined()) return {};
    if (v.is_list() || v.is_dict() || v.is_string()) return to_list(v);
    fail(origin_, where, "'" + v.type_name() + "' object is not iterable");
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope,
                    Location where) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = v;
      return;
    }
    if (!v.is_list() && !v.is_string()) {
      fail(origin_, where, "cannot unpack non-iterable " + v.type_name() + " object");
    }
    const List items = to_list(v);
    if (items.size() != targets.size()) {
      fail(origin_, where, "cannot unpack " + std::to_string(items.size()) + " values into " +
                               std::to_string(targets.size()) + " names");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    List items = iterate(eval(*s.expr, scope), s.expr->where);
    if (s.condition) {
      // `for x in xs if cond` filters before the loop, so loop.length/index count survivors.
      List kept;
      for (const Value& item : items) {
        auto probe = child_of(scope);
        bind_targets(s.targets, item, *probe, s.where);
        if (eval(*s.condition, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, scope, out);
      return;
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      auto iteration = child_of(scope);
      const auto idx = static_cast<std::size_t>(i);
      bind_targets(s.targets, items[idx], *iteration, s.where);
      Dict loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("revindex", Value(n - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[idx - 1] : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < n ? items[idx + 1] : Value::undefined("there is no next item"));
      auto cycle = std::make_shared<Callable>();
      cycle->name = "cycle";
      cycle->call = [i](const CallArgs& args) -> Value {
        if (args.positional.empty()) throw EvalError("no items for cycling given");
        return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
      };
      loop.set("cycle", Value(std::shared_ptr<const Callable>(std::move(cycle))));
      iteration->vars["loop"] = Value(std::move(loop));
      if (exec(s.body, iteration, out) == Flow::break_loop) break;
    }
  }

  void exec_set(const Stmt& s, const ScopePtr& scope) {
    Value v = eval(*s.expr, scope);
    if (!s.attribute.empty()) {
      const Value* target = scope->find(s.targets[0]);
      if (target == nullptr || !target->is_namespace()) {
        fail(origin_, s.where, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
      }
      target->as_namespace().attrs.set(s.attribute, std::move(v));
      return;
    }
    bind_targets(s.targets, v, *scope, s.where);
  }

  Value make_macro(const Stmt& s, const ScopePtr& scope) {
    auto fn = std::make_shared<Callable>();
    fn->name = s.targets[0];
    const Stmt* macro = &s;
    // A weak reference: the defining scope holds the macro, so a strong one would be a cycle.
    // The evaluator outlives every value it makes during one render.
    std::weak_ptr<Scope> defining = scope;
    fn->call = [this, macro, defining](const CallArgs& args) -> Value {
      const ScopePtr outer = defining.lock();
      if (!outer) throw EvalError("macro '" + macro->targets[0] + "' called after its scope ended");
      if (args.positional.size() > macro->params.size()) {
        throw EvalError("macro '" + macro->targets[0] + "' takes not more than " +
                        std::to_string(macro->params.size()) + " argument(s)");
      }
      auto local = child_of(outer);
      for (std::size_t i = 0; i < macro->params.size(); ++i) {
        const MacroParam& p = macro->params[i];
        const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
        for (const auto& [k, v] : args.keyword) {
          if (k == p.name) given = &v;
        }
        if (given != nullptr) {
          local->vars[p.name] = *given;
        } else if (p.default_value) {
          local->vars[p.name] = eval(*p.default_value, local);
        } else {
          local->vars[p.name] = Value::undefined("'" + p.name + "' is undefined");
        }
      }
      for (const auto& [k, v] : args.keyword) {
        bool known = false;
        for (const MacroParam& p : macro->params) known = known || p.name == k;
        if (!known) throw EvalError("macro '" + macro->targets[0] + "' takes no keyword argument '" + k + "'");
      }
      if (++depth_ > kMaxCallDepth) throw EvalError("macro calls nested too deeply");
      std::string text;
      exec(macro->body, local, text);
      --depth_;
      return Value(std::move(text));
    };
    return Value(std::shared_ptr<const Callable>(std::move(fn)));
  }

  // Applies the filters of a set/filter block to `input`, which stands for the placeholder
  // literal at the root of the chain.
  Value eval_chain(const Expr& e, Value input, const ScopePtr& scope) {
    if (e.kind != Expr::Kind::filter) return input;
    Value inner = eval_chain(*e.args[0], std::move(input), scope);
    return guarded(e, [&] { return apply_filter(e.name, inner, eval_args(e, scope)); });
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs args;
    for (std::size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  // Runs `f`, turning a location-less EvalError into BadInput at `e`.
  template <class F>
  Value guarded(const Expr& e, F&& f) {
    try {
      return f();
    } catch (const TemplateRaised& raised) {
      fail(origin_, e.where, std::string("template raised an exception: ") + raised.what());
    } catch (const EvalError& error) {
      fail(origin_, e.where, error.what());
    }
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name: {
        const Value* v = scope->find(e.name);
        return v != nullptr ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value(std::move(items));
      }
      case Expr::Kind::dict: {
        Dict d;
        for (const auto& [k, v] : e.dict_items) {
          const Value key = eval(*k, scope);
          if (!key.is_string()) fail(origin_, k->where, "unsupported dict key of type '" + key.type_name() + "' (only strings)");
          d.set(key.as_string(), eval(*v, scope));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::attribute: {
        const Value obj = eval(*e.args[0], scope);
        return guarded(e, [&] {
          if (obj.is_undefined()) fail_undefined(obj);
          return get_attribute(obj, e.name);
        });
      }
      case Expr::Kind::item: {
        const Value obj = eval(*e.args[0], scope);
        const Value key = eval(*e.args[1], scope);
        return guarded(e, [&] {
          if (obj.is_undefined()) fail_undefined(obj);
          return get_item(obj, key);
        });
      }
      case Expr::Kind::slice: {
        const Value obj = eval(*e.args[0], scope);
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          const auto& p = e.args[static_cast<std::size_t>(i) + 1];
          parts[i] = p ? eval(*p, scope) : Value::none();
        }
        return guarded(e, [&] {
          if (obj.is_undefined()) fail_undefined(obj);
          return get_slice(obj, parts[0], parts[1], parts[2]);
        });
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.args[0], scope);
        const CallArgs args = eval_args(e, scope);
        return guarded(e, [&] {
          if (callee.is_undefined()) fail_undefined(callee);
          if (!callee.is_callable()) throw EvalError("'" + callee.type_name() + "' object is not callable");
          return callee.as_callable().call(args);
        });
      }
      case Expr::Kind::filter: {
        const Value v = eval(*e.args[0], scope);
        const CallArgs args = eval_args(e, scope);
        return guarded(e, [&] { return apply_filter(e.name, v, args); });
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.args[0], scope);
        const CallArgs args = eval_args(e, scope);
        return guarded(e, [&] { return Value(apply_test(e.name, v, args.positional) != e.negated); });
      }
      case Expr::Kind::not_:
        return Value(!eval(*e.args[0], scope).truthy());
      case Expr::Kind::negate:
      case Expr::Kind::plus: {
        const Value v = eval(*e.args[0], scope);
        return guarded(e, [&] {
          if (v.is_undefined()) fail_undefined(v);
          if (!v.is_number()) throw EvalError("bad operand type for unary " + std::string(e.kind == Expr::Kind::negate ? "-" : "+") + ": '" + v.type_name() + "'");
          if (e.kind == Expr::Kind::plus) return v.is_bool() ? Value(v.as_int()) : v;
          return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
        });
      }
      case Expr::Kind::binary: {
        const Value a = eval(*e.args[0], scope);
        const Value b = eval(*e.args[1], scope);
        return guarded(e, [&] { return arithmetic(e.name, a, b); });
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0], scope);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          const bool ok = guarded(e, [&] { return Value(compare(e.ops[i], left, right)); }).as_bool();
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::and_: {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? eval(*e.args[1], scope) : left;
      }
      case Expr::Kind::or_: {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? left : eval(*e.args[1], scope);
      }
      case Expr::Kind::conditional:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        if (e.args[2]) return eval(*e.args[2], scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  const std::string& origin_;
  int depth_ = 0;
};

}  // namespace

std::string render_template(const Body& body, const Dict& context, const std::string& origin) {
  auto globals = std::make_shared<Scope>();
  for (auto& [k, v] : make_globals().entries) globals->vars[k] = v;
  for (const auto& [k, v] : context.entries) globals->vars[k] = v;
  Evaluator evaluator(origin);
  std::string out;
  evaluator.exec(body, globals, out);
  return out;
}

}  // namespace medtune::tokenizer::jinja
