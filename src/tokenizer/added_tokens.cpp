#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

// The code point that ends at byte `end` of valid UTF-8 `s` (which must be non-empty before it).
uint32_t last_char(std::string_view s, size_t end, size_t& begin) {
  begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
  size_t pos = begin;
  return utf8_next(s, pos);
}

// Rust's char::is_alphanumeric, approximated: ASCII letters and digits exactly, and every
// non-ASCII code point that is not whitespace or in the common punctuation blocks.
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (is_unicode_whitespace(cp)) return false;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xA0 && cp <= 0xBF)) return false;
  return true;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) : tokens_(tokens) {
  for (const AddedToken* t : tokens_) {
    if (t->content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(t->content[0])].push_back(t);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;           // where the next match search starts (aho-corasick's position)
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : bucket) {
      if (text.compare(pos, t->content.size(), t->content) == 0) {
        hit = t;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + hit->content.size();
    pos = stop;
    if (hit->single_word) {
      size_t b = 0;
      const bool start_ok = start == 0 || !is_word_char(last_char(text, start, b));
      size_t p = stop;
      const bool stop_ok = stop == text.size() || !is_word_char(utf8_next(text, p));
      if (!start_ok || !stop_ok) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t b = 0;
        if (!is_unicode_whitespace(last_char(text, s, b))) break;
        s = b;
      }
      start = s;
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t p = stop;
        if (!is_unicode_whitespace(utf8_next(text, p))) break;
        stop = p;
      }
      pos = std::max(pos, stop);
    }
    if (start > start_offset) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), hit->id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
}

}  // namespace medtune::tokenizer
