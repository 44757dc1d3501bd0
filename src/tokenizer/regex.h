// A compiled Unicode regex (PCRE2 with PCRE2_UTF | PCRE2_UCP, JIT when available) used by the
// pre-tokenizers and normalizers. HF tokenizers uses Oniguruma; with UCP, PCRE2 gives \p{L},
// \p{N}, \s and case-insensitive groups the same Unicode meaning for the patterns we support.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace medtune::tokenizer {

class Regex {
 public:
  // Throws BadInput naming `where` and the pattern when PCRE2 rejects it.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [begin, end) of all non-overlapping matches in valid UTF-8 `text`, left to
  // right. Empty matches are skipped (HF's find_iter never yields them for our patterns).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so that users need no PCRE2 headers
};

// Escapes a literal string so that it matches itself in a PCRE2 pattern.
std::string regex_escape(std::string_view literal);

}  // namespace medtune::tokenizer
