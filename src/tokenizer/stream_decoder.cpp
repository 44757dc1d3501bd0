#include "tokenizer/stream_decoder.h"

namespace medtune::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
// Text is held back while it ends in U+FFFD: either an incomplete character (more bytes will
// come) or a real U+FFFD, which a following token reveals. Counting tokens is not enough to
// tell them apart (byte-fallback bytes are judged as one group, so one incomplete character
// can turn a run of valid bytes before it into U+FFFDs), so hold like HF's DecodeStream and only
// cap the wait so that a long run of invalid bytes cannot make each push quadratic.
constexpr size_t kMaxPending = 64;

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacement.size() && s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::string text = tok_.decode(ids_, skip_special_);
  const size_t pending = ids_.size() - prefix_count_;
  if (text.size() <= prefix_text_.size() || (ends_with_replacement(text) && pending < kMaxPending)) {
    return "";
  }
  std::string out = new_text(text);
  // As HF's DecodeStream: the ids of the chunk just shown become the next context. A chunk
  // starts where a whole character ended, so the context never starts inside a character.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_count_));
  prefix_count_ = ids_.size();
  prefix_text_ = tok_.decode(ids_, skip_special_);
  return out;
}

std::string StreamDecoder::new_text(const std::string& text) const {
  if (text.compare(0, prefix_text_.size(), prefix_text_) == 0) return text.substr(prefix_text_.size());
  // The context no longer decodes to a prefix (byte-fallback bytes of the context and of the
  // new ids were judged together); decode the new ids on their own rather than repeat text.
  const std::vector<int32_t> fresh(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_count_), ids_.end());
  return tok_.decode(fresh, skip_special_);
}

std::string StreamDecoder::flush() {
  std::string out;
  if (ids_.size() > prefix_count_) out = new_text(tok_.decode(ids_, skip_special_));
  ids_.clear();
  prefix_count_ = 0;
  prefix_text_.clear();
  return out;
}

}  // namespace medtune::tokenizer
