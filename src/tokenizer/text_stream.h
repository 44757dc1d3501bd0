// Generated tokens to the text a reader sees (a server's client, `generate`'s terminal): whole
// UTF-8 characters only (StreamDecoder), cut before the first `stop` string, which is never shown
// (OpenAI's rule). While the text ends in what could still become a stop string, that tail is held
// back, so a streamed answer never shows the first half of a stop string that then completes.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"

namespace medtune::tokenizer {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stops)
      : decoder_(tok, /*skip_special=*/true), stops_(std::move(stops)) {}

  // The text that `id` makes safe to show (often empty). After a stop string, stopped() is true
  // and further calls return nothing.
  std::string push(int32_t id);
  // What was held back, at the end of generation (empty after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }
  // The stop string the text was cut at (the earliest; of two at one place, the first listed).
  const std::string& stopped_at() const { return stopped_at_; }

 private:
  std::string release();  // pending_ minus its longest tail that begins a stop string
  size_t find_stop();     // where pending_'s earliest stop string begins (npos: none), noted

  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string pending_;  // decoded, not yet shown
  bool stopped_ = false;
  std::string stopped_at_;
};

}  // namespace medtune::tokenizer
