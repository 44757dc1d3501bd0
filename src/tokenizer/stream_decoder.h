// StreamDecoder: decodes ids one at a time for streaming output (generate, serve) and never
// returns part of a UTF-8 character. It follows HF's DecodeStream: decode a short window of ids
// (the last already-shown ids as context, then the new ones) and emit the text beyond what the
// context alone decodes to, holding it back while it ends in U+FFFD (an incomplete character).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(tokenizer), skip_special_(skip_special) {}

  // Text completed by `id`: whole UTF-8 characters only; often empty.
  std::string push(int32_t id);
  // Whatever is held back (an incomplete character becomes U+FFFD); resets the stream.
  std::string flush();

 private:
  std::string new_text(const std::string& text) const;

  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;   // context ids (already shown) followed by pending ids
  size_t prefix_count_ = 0;    // how many of ids_ are context
  std::string prefix_text_;    // decode of the context ids
};

}  // namespace medtune::tokenizer
