#include "tokenizer/text_stream.h"

#include <algorithm>

namespace medtune::tokenizer {

std::string TextStream::push(int32_t id) {
  if (stopped_) return {};
  pending_ += decoder_.push(id);
  const size_t cut = find_stop();
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  return release();
}

// The earliest stop string wins: it is where the answer ends.
size_t TextStream::find_stop() {
  size_t cut = std::string::npos;
  for (const std::string& s : stops_)
    if (const size_t at = pending_.find(s); at < cut) {
      cut = at;
      stopped_at_ = s;
    }
  return cut;
}

std::string TextStream::release() {
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  pending_ += decoder_.flush();
  // A stop string may complete only in the flushed tail (an incomplete character held back).
  const size_t cut = find_stop();
  if (cut != std::string::npos) {
    stopped_ = true;
    pending_.resize(cut);
  }
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace medtune::tokenizer
