// Pre-tokenizers: split normalized text into words before BPE, as HF tokenizers does.
// Supported: Split (regex or literal, all five delimiter behaviours, invert), ByteLevel
// (GPT-2 regex, add_prefix_space, byte -> unicode mapping), Digits, Metaspace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace medtune::tokenizer {

// GPT-2's pattern (HF ByteLevel with use_regex = true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's Split pattern.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's Split pattern (single digits).
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace };
  Kind kind = Kind::Split;
  // Split (Digits is a Split on \p{N}) and ByteLevel with use_regex.
  std::shared_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  bool split = true;
};

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Splits `text` into `words` (appended). `at_text_start`: the piece begins at offset 0 of the
  // user's text (Metaspace's prepend_scheme "first" depends on it).
  void split(std::string_view text, bool at_text_start, std::vector<std::string>& words) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// Splits `text` by the matches of `regex` according to `behavior` (HF NormalizedString::split).
void split_by_regex(std::string_view text, const Regex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string>& out);

}  // namespace medtune::tokenizer
