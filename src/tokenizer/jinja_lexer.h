// Splits a chat template into tokens the way jinja2's lexer does with the settings transformers
// uses (trim_blocks=True, lstrip_blocks=True): text runs between tags already have the
// whitespace control of `{%-`, `-%}`, `{{-`, `-}}`, `{%+`, `+%}` applied, so the parser and the
// evaluator never think about whitespace again.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace medtune::tokenizer::jinja {

// 1-based line and column in the template source (after newline normalisation).
struct Location {
  int line = 0;
  int column = 0;
};

// Throws medtune::BadInput "<origin>:<line>:<col>: <message>".
[[noreturn]] void fail(const std::string& origin, Location where, const std::string& message);

enum class TokenType {
  data,            // literal template text
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  string,          // text holds the decoded value
  integer,
  floating,
  op,              // operator or punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  eof,
};

struct Token {
  TokenType type = TokenType::eof;
  std::string text;
  Location where;
};

// jinja2 normalises "\r\n" and "\r" to "\n" and drops one trailing newline of the source
// (keep_trailing_newline=False); the lexer works on the result, so do it first.
std::string normalize_template_source(std::string_view source);

// Tokenizes normalized source. Errors (unterminated tag, string or comment, stray character,
// unbalanced brackets) throw BadInput naming origin, line and column.
std::vector<Token> lex_template(const std::string& source, const std::string& origin);

}  // namespace medtune::tokenizer::jinja
