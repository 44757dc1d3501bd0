// Normalizers that Llama-family tokenizer.json files use, applied to each piece of text between
// added tokens (as HF does). Unicode normalization forms (NFC, NFKC...) and Lowercase are not implemented; the
// tokenizer.json parser rejects them with a BadInput rather than tokenizing differently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace medtune::tokenizer {

struct NormalizerStep {
  enum class Kind { Prepend, Replace };
  Kind kind = Kind::Prepend;
  std::string text;                 // Prepend: the prefix; Replace: the literal pattern
  std::string content;              // Replace: the replacement
  std::shared_ptr<Regex> regex;     // Replace with a {"Regex": ...} pattern
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
