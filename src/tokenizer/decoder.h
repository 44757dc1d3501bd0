// Decoders: turn token pieces back into text, as HF tokenizers' decoders do (each step maps the
// list of pieces to a new list; the result is their concatenation).
// Supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace medtune::tokenizer {

struct DecoderStep {
  enum class Kind { ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace };
  Kind kind = Kind::ByteLevel;
  std::string pattern;             // Replace (literal)
  std::shared_ptr<Regex> regex;    // Replace with a regex pattern
  std::string content;             // Replace: replacement; Strip: the character
  size_t start = 0, stop = 0;      // Strip
  std::string replacement = "\xE2\x96\x81";  // Metaspace
  bool prepend = true;             // Metaspace: prepend_scheme != "never"
};

class Decoder {
 public:
  void add(DecoderStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Without steps HF joins the pieces with spaces; that is what this does too.
  std::string decode(std::vector<std::string> pieces) const;

 private:
  std::vector<DecoderStep> steps_;
};

}  // namespace medtune::tokenizer
