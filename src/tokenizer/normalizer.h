// The normalizers of tokenizer.json files, applied to each piece of text between added tokens
// (as HF does): Prepend, Replace, the Unicode forms NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// StripAccents and Nmt (the Unicode ones in unicode_normalize.h). Precompiled (SentencePiece's
// charsmap), BertNormalizer and ByteLevel are not implemented; the tokenizer.json parser rejects
// them with a BadInput rather than tokenizing differently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_normalize.h"

namespace medtune::tokenizer {

struct NormalizerStep {
  enum class Kind { Prepend, Replace, Unicode, Lowercase, Strip, StripAccents, Nmt };
  Kind kind = Kind::Prepend;
  std::string text;                 // Prepend: the prefix; Replace: the literal pattern
  std::string content;              // Replace: the replacement
  std::shared_ptr<Regex> regex;     // Replace with a {"Regex": ...} pattern
  UnicodeForm form = UnicodeForm::NFC;  // Unicode
  bool strip_left = true;           // Strip
  bool strip_right = true;          // Strip
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  void normalize(std::string& text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// text = prefix + text. (std::string::insert(0, ...) trips a false -Wrestrict in g++ 12.)
void prepend(std::string& text, std::string_view prefix);

// Replaces every occurrence of `from` in `text` by `to`.
void replace_all(std::string& text, const std::string& from, const std::string& to);

}  // namespace medtune::tokenizer
