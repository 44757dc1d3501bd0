#include "tokenizer/jinja_text.h"

namespace medtune::tokenizer::jinja {

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + static_cast<std::size_t>(extra) >= s.size()) {  // truncated sequence
      out.push_back(c);
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strippable = [&](char32_t cp) {
    if (!chars) return is_python_space(cp);
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  std::size_t b = 0;
  std::size_t e = cps.size();
  if (left) {
    while (b < e && strippable(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strippable(cps[e - 1])) --e;
  }
  return utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                           cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

char32_t to_upper_cp(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp == 0xB5) return 0x39C;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    // Latin Extended-A alternates upper/lower, with the parity flipping at 0x139..0x148 and
    // 0x179..0x17E.
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
      return (cp % 2 == 0) ? cp - 1 : cp;
    }
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    if (cp == 0x138 || cp == 0x149) return cp;
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

char32_t to_lower_cp(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
      return (cp % 2 == 1) ? cp + 1 : cp;
    }
    if (cp == 0x130) return 'i';
    if (cp == 0x138 || cp == 0x149 || cp == 0x131 || cp == 0x17F) return cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

bool is_cased_letter(char32_t cp) {
  return to_upper_cp(cp) != cp || to_lower_cp(cp) != cp || cp == 0xDF;
}

std::string py_upper(std::string_view s) {
  std::string out;
  for (char32_t cp : utf8_decode(s)) {
    if (cp == 0xDF) {  // German sharp s has no single upper-case letter in Python's mapping.
      out += "SS";
      continue;
    }
    utf8_append(out, to_upper_cp(cp));
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  for (char32_t cp : utf8_decode(s)) utf8_append(out, to_lower_cp(cp));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : utf8_decode(s)) {
    const bool cased = is_cased_letter(cp);
    utf8_append(out, previous_cased ? to_lower_cp(cp) : to_upper_cp(cp));
    previous_cased = cased;
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t cp : utf8_decode(s)) {
    utf8_append(out, first ? to_upper_cp(cp) : to_lower_cp(cp));
    first = false;
  }
  return out;
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep) {
    // Runs of whitespace separate; leading and trailing whitespace yields no empty parts.
    const std::vector<char32_t> cps = utf8_decode(s);
    std::size_t i = 0;
    std::int64_t splits = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        std::size_t e = cps.size();
        while (e > i && is_python_space(cps[e - 1])) --e;
        parts.push_back(utf8_encode(std::vector<char32_t>(
            cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(e))));
        break;
      }
      std::size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      parts.push_back(utf8_encode(std::vector<char32_t>(
          cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j))));
      ++splits;
      i = j;
    }
    return parts;
  }
  std::size_t start = 0;
  std::int64_t splits = 0;
  while (maxsplit < 0 || splits < maxsplit) {
    const std::size_t at = s.find(*sep, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
    ++splits;
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view with,
                       std::int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` between every code point (and at both ends).
    std::int64_t done = 0;
    const std::vector<char32_t> cps = utf8_decode(s);
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      utf8_append(out, cp);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += with;
    start = at + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> decode_string_literal(std::string_view body, std::string& error) {
  std::string out;
  std::size_t i = 0;
  while (i < body.size()) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      ++i;
      continue;
    }
    const char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;  // A backslash-newline joins lines, as in Python.
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        if (i + digits > body.size()) {
          error = std::string("truncated \\") + e + " escape";
          return std::nullopt;
        }
        char32_t cp = 0;
        for (std::size_t k = 0; k < digits; ++k) {
          const int h = hex_value(body[i + k]);
          if (h < 0) {
            error = std::string("truncated \\") + e + " escape";
            return std::nullopt;
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) {
          error = "illegal Unicode character in \\U escape";
          return std::nullopt;
        }
        utf8_append(out, cp);
        i += digits;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k, ++i) {
            cp = cp * 8 + static_cast<char32_t>(body[i] - '0');
          }
          utf8_append(out, cp);
        } else {
          // Python keeps unknown escapes such as "\d" verbatim.
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

}  // namespace medtune::tokenizer::jinja
