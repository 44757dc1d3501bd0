#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja_builtins.h"

namespace medtune::tokenizer::jinja {

namespace {

// Jinja tags this interpreter deliberately does not implement (chat templates do not use
// them); named so the error says "unsupported" rather than "unknown".
constexpr std::string_view kUnsupportedTags[] = {"include", "import", "from", "extends", "block",
                                                 "call", "with", "autoescape", "do", "trans",
                                                 "pluralize", "debug"};

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data: return "template text";
    case TokenType::variable_begin: return "'{{'";
    case TokenType::variable_end: return "'}}'";
    case TokenType::block_begin: return "'{%'";
    case TokenType::block_end: return "'%}'";
    case TokenType::name: return "'" + t.text + "'";
    case TokenType::string: return "string literal";
    case TokenType::integer:
    case TokenType::floating: return "number " + t.text;
    case TokenType::op: return "'" + t.text + "'";
    case TokenType::eof: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin)
      : tokens_(tokens), origin_(origin) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != TokenType::eof) {
      // subparse only stops early at an end tag nobody opened.
      fail(origin_, cur().where, "unexpected " + describe(cur()) + " without a matching opening tag");
    }
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(std::size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(const char* name) const {
    return cur().type == TokenType::name && cur().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail(origin_, cur().where, "expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  const Token& expect_name() {
    if (cur().type != TokenType::name) unexpected("a name");
    return next();
  }
  void expect_block_end() {
    if (cur().type != TokenType::block_end) unexpected("'%}'");
    next();
  }

  // Statements until a block tag whose keyword is in `ends` (left unconsumed, positioned at the
  // keyword) or the end of the template.
  Body subparse(std::initializer_list<std::string_view> ends) {
    Body body;
    while (cur().type != TokenType::eof) {
      const Token& t = cur();
      if (t.type == TokenType::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::text;
        s->where = t.where;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::variable_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::output;
        s->where = t.where;
        next();
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::variable_end) unexpected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::block_begin) {
        const Token& keyword = peek();
        if (keyword.type == TokenType::name &&
            std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          next();  // leave the stream at the keyword
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        unexpected("template text or a tag");
      }
    }
    if (ends.size() > 0) {
      std::string list;
      for (auto e : ends) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
      fail(origin_, cur().where, "unexpected end of template, expected " + list);
    }
    return body;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& keyword = cur();
    if (keyword.type != TokenType::name) unexpected("a tag name");
    const std::string& k = keyword.text;
    auto s = std::make_unique<Stmt>();
    s->where = keyword.where;
    next();
    if (k == "if") return parse_if(std::move(s));
    if (k == "for") return parse_for(std::move(s));
    if (k == "set") return parse_set(std::move(s));
    if (k == "macro") return parse_macro(std::move(s));
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(origin_, s->where, "'" + k + "' outside of a loop");
      s->kind = k == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      expect_block_end();
      return s;
    }
    if (k == "filter") {
      s->kind = Stmt::Kind::filter_block;
      s->filter_chain = parse_filter_chain(s->where);
      expect_block_end();
      s->body = subparse({"endfilter"});
      next();
      expect_block_end();
      return s;
    }
    if (k == "generation") {
      // transformers' {% generation %} marks assistant text for masks; rendering ignores it.
      s->kind = Stmt::Kind::scope;
      expect_block_end();
      s->body = subparse({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), k) !=
        std::end(kUnsupportedTags)) {
      fail(origin_, keyword.where, "unsupported tag '" + k + "'");
    }
    if (k.rfind("end", 0) == 0 || k == "elif" || k == "else") {
      fail(origin_, keyword.where, "unexpected '" + k + "' without a matching opening tag");
    }
    fail(origin_, keyword.where, "unknown tag '" + k + "'");
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::if_;
    ExprPtr condition = parse_tuple(true);
    expect_block_end();
    while (true) {
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      const std::string k = next().text;
      if (k == "elif") {
        condition = parse_tuple(true);
        expect_block_end();
      } else if (k == "else") {
        expect_block_end();
        s->branches.emplace_back(nullptr, subparse({"endif"}));
        next();
        expect_block_end();
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool parenthesized = skip_op("(");
    do {
      targets.push_back(expect_name().text);
    } while (skip_op(","));
    if (parenthesized) expect_op(")");
    return targets;
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::for_;
    s->targets = parse_targets();
    if (!skip_name("in")) unexpected("'in'");
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->condition = parse_tuple(true);
    if (is_name("recursive")) fail(origin_, cur().where, "unsupported loop modifier 'recursive'");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end();
      s->else_body = subparse({"endfor"});
      next();
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::set;
    s->targets.push_back(expect_name().text);
    if (skip_op(".")) {
      s->attribute = expect_name().text;
    } else {
      while (skip_op(",")) s->targets.push_back(expect_name().text);
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (!s->attribute.empty() || s->targets.size() != 1) unexpected("'='");
    // {% set name %}...{% endset %}, optionally filtered: {% set name | trim %}.
    s->kind = Stmt::Kind::set_block;
    if (is_op("|")) s->filter_chain = parse_filter_chain(s->where);
    expect_block_end();
    s->body = subparse({"endset"});
    next();
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::macro;
    s->targets.push_back(expect_name().text);
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name().text;
      if (skip_op("=")) p.default_value = parse_expression(true);
      s->params.push_back(std::move(p));
    }
    next();
    expect_block_end();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // a macro body cannot break out of the caller's loop
    s->body = subparse({"endmacro"});
    loop_depth_ = saved_depth;
    next();
    if (cur().type == TokenType::name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // `| f(args) | g` applied to a placeholder literal (for set and filter blocks).
  ExprPtr parse_filter_chain(Location where) {
    auto placeholder = std::make_unique<Expr>();
    placeholder->kind = Expr::Kind::literal;
    placeholder->where = where;
    ExprPtr node = std::move(placeholder);
    if (!is_op("|")) {
      // {% filter name %}: the first filter has no leading pipe.
      node = parse_filter(std::move(node));
    }
    while (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    }
    return node;
  }

  // ---- expressions (jinja2's precedence, loosest first) ----

  ExprPtr make(Expr::Kind kind, Location where) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->where = where;
    return e;
  }

  ExprPtr parse_tuple(bool with_condexpr) {
    const Location where = cur().where;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::tuple, where);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::block_end || cur().type == TokenType::variable_end ||
          is_op(")") || is_name("if") || is_name("in")) {
        break;
      }
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      auto c = make(Expr::Kind::conditional, cur().where);
      next();
      c->args.push_back(parse_or());
      c->args.push_back(std::move(expr));
      if (skip_name("else")) {
        c->args.push_back(parse_condexpr());
      } else {
        c->args.push_back(nullptr);
      }
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = make(Expr::Kind::or_, cur().where);
      next();
      e->args.push_back(std::move(left));
      e->args.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = make(Expr::Kind::and_, cur().where);
      next();
      e->args.push_back(std::move(left));
      e->args.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make(Expr::Kind::not_, cur().where);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Location where = cur().where;
    ExprPtr first = parse_math1();
    ExprPtr node;
    while (true) {
      std::string op;
      if (cur().type == TokenType::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!node) {
        node = make(Expr::Kind::compare, where);
        node->args.push_back(std::move(first));
      }
      node->ops.push_back(op);
      node->args.push_back(parse_math1());
    }
    return node ? std::move(node) : std::move(first);
  }

  ExprPtr binary(ExprPtr left, const Token& op, ExprPtr right) {
    auto e = make(Expr::Kind::binary, op.where);
    e->name = op.text;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? Expr::Kind::negate : Expr::Kind::plus, cur().where);
      next();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.where);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.where);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.where);
        auto e = make(Expr::Kind::name, t.where);
        e->name = t.text;
        return e;
      }
      case TokenType::string: {
        std::string s = next().text;
        while (cur().type == TokenType::string) s += next().text;  // adjacent literals join
        return literal(Value(std::move(s)), t.where);
      }
      case TokenType::integer: {
        next();
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(origin_, t.where, "integer literal " + t.text + " is too large");
        return literal(Value(static_cast<std::int64_t>(v)), t.where);
      }
      case TokenType::floating:
        next();
        return literal(Value(std::strtod(t.text.c_str(), nullptr)), t.where);
      case TokenType::op:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return make(Expr::Kind::tuple, t.where);
          ExprPtr inner = parse_tuple(true);
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          next();
          auto e = make(Expr::Kind::list, t.where);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          next();
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = make(Expr::Kind::dict, t.where);
          while (!is_op("}")) {
            if (!e->dict_items.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr key = parse_expression(true);
            expect_op(":");
            ExprPtr value = parse_expression(true);
            e->dict_items.emplace_back(std::move(key), std::move(value));
          }
          next();
          return e;
        }
        break;
      default:
        break;
    }
    unexpected("an expression");
  }

  ExprPtr literal(Value v, Location where) {
    auto e = make(Expr::Kind::literal, where);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const Location where = next().where;
        if (cur().type == TokenType::integer) {
          auto e = make(Expr::Kind::item, where);
          e->args.push_back(std::move(node));
          e->args.push_back(parse_primary());
          node = std::move(e);
          continue;
        }
        auto e = make(Expr::Kind::attribute, where);
        e->name = expect_name().text;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Location where = next().where;  // '['
    ExprPtr parts[3];
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) parts[2] = parse_expression(true);
    }
    expect_op("]");
    auto e = make(is_slice ? Expr::Kind::slice : Expr::Kind::item, where);
    e->args.push_back(std::move(node));
    for (auto& p : parts) {
      if (!is_slice && !p) continue;
      e->args.push_back(std::move(p));
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(origin_, cur().where, "unsupported argument unpacking");
      if (cur().type == TokenType::name && peek().type == TokenType::op && peek().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) {
          fail(origin_, cur().where, "positional argument follows keyword argument");
        }
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::call, callee->where);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr node) {
    const Token& name = expect_name();
    std::string full = name.text;
    while (skip_op(".")) full += "." + expect_name().text;
    if (!is_known_filter(full)) fail(origin_, name.where, "unsupported filter '" + full + "'");
    auto e = make(Expr::Kind::filter, name.where);
    e->name = full;
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    next();  // 'is'
    const bool negated = skip_name("not");
    const Token& name = expect_name();
    if (!is_known_test(name.text)) fail(origin_, name.where, "unsupported test '" + name.text + "'");
    auto e = make(Expr::Kind::test, name.where);
    e->name = name.text;
    e->negated = negated;
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
      if (!e->kwargs.empty()) fail(origin_, name.where, "keyword arguments to a test");
    } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
                cur().type == TokenType::integer || cur().type == TokenType::floating ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(origin_, cur().where, "cannot chain multiple tests with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  std::size_t pos_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_all();
}

}  // namespace medtune::tokenizer::jinja
