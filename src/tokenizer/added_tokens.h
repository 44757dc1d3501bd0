// Added (and special) tokens: strings such as "<|im_start|>" that are cut out of the text before
// normalization and BPE, as HF's AddedVocabulary does: leftmost-longest matching, with the
// single_word / lstrip / rstrip rules, non-normalized tokens matched on the raw text and
// normalized ones on the normalized text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace medtune::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;  // also swallows whitespace on its left
  bool rstrip = false;  // also swallows whitespace on its right
  bool normalized = false;
};

// A run of plain text, or one added token (id >= 0).
struct Segment {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return tokens_.empty(); }
  // Appends the segments of `text` (views into `text`) to `out`.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  std::vector<const AddedToken*> tokens_;
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // longest first
};

}  // namespace medtune::tokenizer
