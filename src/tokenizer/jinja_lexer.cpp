#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "tokenizer/jinja_text.h"

namespace medtune::tokenizer::jinja {

void fail(const std::string& origin, Location where, const std::string& message) {
  throw medtune::BadInput(origin + ":" + std::to_string(where.line) + ":" +
                          std::to_string(where.column) + ": " + message);
}

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

// Python's str.rstrip() on the text before a `{%-`/`{{-`/`{#-` tag.
std::string rstrip_python(std::string_view s) { return py_strip(s, std::nullopt, false, true); }

bool all_python_space(std::string_view s) {
  if (s.empty()) return false;  // jinja2 matches `\s+`: at least one character.
  for (char32_t cp : utf8_decode(s)) {
    if (!is_python_space(cp)) return false;
  }
  return true;
}

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(source), origin_(origin) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const std::size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      std::size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::string text = src_.substr(pos_, tag - pos_);
      text = control_leading_text(std::move(text), sign, kind != '{');
      emit_data(text, pos_);
      if (kind == '#') {
        lex_comment(tag, after);
      } else if (kind == '%' && try_raw(tag, after)) {
        // the raw block was emitted as data
      } else {
        lex_tag(tag, after, kind == '%');
      }
    }
    tokens_.push_back(Token{TokenType::eof, "", locate(src_.size())});
    return std::move(tokens_);
  }

 private:
  Location locate(std::size_t pos) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const auto line = static_cast<std::size_t>(it - line_starts_.begin());
    const std::size_t start = line_starts_[line - 1];
    return Location{static_cast<int>(line),
                    static_cast<int>(utf8_length(std::string_view(src_).substr(start, pos - start))) + 1};
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // The text before a tag: `-` strips all whitespace before it; lstrip_blocks strips the
  // spaces and tabs between the start of the line and a block or comment tag, unless `+`.
  std::string control_leading_text(std::string text, char sign, bool block_or_comment) const {
    if (sign == '-') return rstrip_python(text);
    if (sign == '+' || !block_or_comment) return text;
    const std::size_t newline = text.rfind('\n');
    const std::size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if ((line_start > 0 || line_starting_) &&
        all_python_space(std::string_view(text).substr(line_start))) {
      text.resize(line_start);
    }
    return text;
  }

  void emit_data(const std::string& text, std::size_t at) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::data, text, locate(at)});
  }

  // After a block or comment end: `-` eats all following whitespace, trim_blocks one newline,
  // `+` nothing. Returns the position after what was eaten and records whether the consumed
  // text ended a line (jinja2's line_starting, which lstrip_blocks needs).
  std::size_t consume_after_end(std::size_t end_pos, char sign, bool trim_blocks) {
    std::size_t p = end_pos;
    if (sign == '-') {
      while (p < src_.size() && is_space_byte(src_[p])) ++p;
    } else if (sign != '+' && trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    return p;
  }

  void lex_comment(std::size_t tag, std::size_t after) {
    const std::size_t close = src_.find("#}", after);
    if (close == std::string::npos) fail(origin_, locate(tag), "missing end of comment tag '#}'");
    char sign = 0;
    if (close > after && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    pos_ = consume_after_end(close + 2, sign, true);
  }

  // `{% raw %}...{% endraw %}`: the body is literal text.
  bool try_raw(std::size_t tag, std::size_t after) {
    std::size_t p = after;
    while (p < src_.size() && is_space_byte(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space_byte(src_[p])) ++p;
    std::size_t body;
    if (src_.compare(p, 3, "-%}") == 0) {
      body = p + 3;
      while (body < src_.size() && is_space_byte(src_[body])) ++body;
    } else if (src_.compare(p, 2, "%}") == 0) {
      body = p + 2;
    } else {
      return false;
    }
    std::size_t search = body;
    while (true) {
      const std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail(origin_, locate(tag), "missing end of raw directive");
      std::size_t q = open + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_space_byte(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && is_space_byte(src_[q])) ++q;
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      line_starting_ = body > 0 && src_[body - 1] == '\n';
      emit_data(control_leading_text(src_.substr(body, open - body), sign, true), body);
      pos_ = consume_after_end(q + 2, end_sign, true);
      return true;
    }
  }

  void lex_tag(std::size_t tag, std::size_t after, bool block) {
    tokens_.push_back(Token{block ? TokenType::block_begin : TokenType::variable_begin, "",
                            locate(tag)});
    std::vector<char> balance;
    std::size_t p = after;
    while (true) {
      while (p < src_.size() && is_space_byte(src_[p])) ++p;
      if (p >= src_.size()) {
        fail(origin_, locate(tag),
             std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") +
                 "' to close the tag opened here");
      }
      if (balance.empty() && end_of_tag(p, block)) return;
      p = lex_expression_token(p, balance);
    }
  }

  bool end_of_tag(std::size_t p, bool block) {
    const char* close = block ? "%}" : "}}";
    char sign = 0;
    std::size_t q = p;
    if (src_[q] == '-' || (block && src_[q] == '+')) {
      sign = src_[q];
      ++q;
    }
    if (src_.compare(q, 2, close) != 0) return false;
    tokens_.push_back(Token{block ? TokenType::block_end : TokenType::variable_end, "", locate(p)});
    pos_ = consume_after_end(q + 2, sign, block);
    return true;
  }

  std::size_t lex_expression_token(std::size_t p, std::vector<char>& balance) {
    const Location where = locate(p);
    const char c = src_[p];
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p, where);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t q = p;
      while (q < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) {
        ++q;
      }
      tokens_.push_back(Token{TokenType::name, src_.substr(p, q - p), where});
      return q;
    }
    if (c == '\'' || c == '"') {
      std::size_t q = p + 1;
      while (q < src_.size() && src_[q] != c) q += (src_[q] == '\\') ? 2 : 1;
      if (q >= src_.size()) fail(origin_, where, "unterminated string literal");
      std::string error;
      auto value = decode_string_literal(std::string_view(src_).substr(p + 1, q - p - 1), error);
      if (!value) fail(origin_, where, "bad escape in string literal: " + error);
      tokens_.push_back(Token{TokenType::string, *value, where});
      return q + 1;
    }
    static const char* const operators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/",
                                            "*",  "%",  "~",  "<",  ">",  "=",  ".", ":", "|",
                                            ",",  ";",  "(",  ")",  "[",  "]",  "{", "}"};
    for (const char* op : operators) {
      const std::string_view o(op);
      if (src_.compare(p, o.size(), o) != 0) continue;
      if (o == "(" || o == "[" || o == "{") {
        balance.push_back(op[0]);
      } else if (o == ")" || o == "]" || o == "}") {
        const char open = o == ")" ? '(' : (o == "]" ? '[' : '{');
        if (balance.empty() || balance.back() != open) {
          fail(origin_, where, "unexpected '" + std::string(o) + "'");
        }
        balance.pop_back();
      }
      tokens_.push_back(Token{TokenType::op, std::string(o), where});
      return p + o.size();
    }
    fail(origin_, where, "unexpected character '" + std::string(1, c) + "'");
  }

  std::size_t lex_number(std::size_t p, Location where) {
    // Integers may use `_` separators; a float needs digits after its '.', as in jinja2
    // ("1." is the integer 1 followed by an attribute dot).
    auto digits = [&](std::size_t q) {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                 (src_[q] == '_' && q + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[q + 1]))))) {
        ++q;
      }
      return q;
    };
    std::size_t q = digits(p);
    bool is_float = false;
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::op &&
                           tokens_.back().text == ".";
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      q = digits(q + 1);
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      std::size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = p; i < q; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back(Token{is_float ? TokenType::floating : TokenType::integer, text, where});
    return q;
  }

  const std::string& src_;
  const std::string& origin_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace medtune::tokenizer::jinja
