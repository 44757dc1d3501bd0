#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"

namespace medtune::tokenizer {

void split_by_regex(std::string_view text, const Regex& regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string>& out) {
  if (text.empty()) return;
  thread_local std::vector<std::pair<size_t, size_t>> hits;
  hits.clear();
  regex.find_all(text, hits);
  // (begin, end, is_delimiter) covering the whole text, as HF's find_matches.
  struct Range {
    size_t b, e;
    bool match;
  };
  thread_local std::vector<Range> ranges;
  ranges.clear();
  size_t pos = 0;
  for (const auto& [b, e] : hits) {
    if (b > pos) ranges.push_back({pos, b, invert});
    ranges.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < text.size()) ranges.push_back({pos, text.size(), invert});

  thread_local std::vector<std::pair<size_t, size_t>> pieces;
  pieces.clear();
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& r : ranges) {
        if (!r.match) pieces.emplace_back(r.b, r.e);
      }
      break;
    case SplitBehavior::Isolated:
      for (const auto& r : ranges) pieces.emplace_back(r.b, r.e);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.match && !previous_match && !pieces.empty()) {
          pieces.back().second = r.e;
        } else {
          pieces.emplace_back(r.b, r.e);
        }
        previous_match = r.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;  // walking right to left
      for (size_t i = ranges.size(); i-- > 0;) {
        const auto& r = ranges[i];
        if (r.match && !previous_match && !pieces.empty()) {
          pieces.back().first = r.b;
        } else {
          pieces.emplace_back(r.b, r.e);
        }
        previous_match = r.match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.match == previous_match && !pieces.empty()) {
          pieces.back().second = r.e;
        } else {
          pieces.emplace_back(r.b, r.e);
        }
        previous_match = r.match;
      }
      break;
    }
  }
  for (const auto& [b, e] : pieces) {
    if (e > b) out.emplace_back(text.substr(b, e - b));
  }
}

void PreTokenizer::split(std::string_view text, bool at_text_start,
                         std::vector<std::string>& words) const {
  std::vector<std::string> current;
  current.emplace_back(text);
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      std::string& piece = current[i];
      switch (step.kind) {
        case PreTokenizerStep::Kind::Split:
          split_by_regex(piece, *step.regex, step.behavior, step.invert, next);
          break;
        case PreTokenizerStep::Kind::ByteLevel: {
          if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') prepend(piece, " ");
          const size_t first = next.size();
          if (step.regex) {
            split_by_regex(piece, *step.regex, SplitBehavior::Isolated, false, next);
          } else if (!piece.empty()) {
            next.push_back(piece);
          }
          for (size_t k = first; k < next.size(); ++k) {
            std::string mapped;
            mapped.reserve(next[k].size() * 2);
            bytes_to_unicode(next[k], mapped);
            next[k] = std::move(mapped);
          }
          break;
        }
        case PreTokenizerStep::Kind::Metaspace: {
          replace_all(piece, " ", step.replacement);
          // HF looks at the piece's offset in the original text for "first"; only the first
          // piece of a segment that starts the text can sit at offset 0.
          const bool add_prefix =
              step.prepend == PreTokenizerStep::Prepend::Always ||
              (step.prepend == PreTokenizerStep::Prepend::First && at_text_start && i == 0);
          if (add_prefix && piece.compare(0, step.replacement.size(), step.replacement) != 0) {
            prepend(piece, step.replacement);
          }
          if (step.split) {
            split_by_regex(piece, *step.regex, SplitBehavior::MergedWithNext, false, next);
          } else if (!piece.empty()) {
            next.push_back(piece);
          }
          break;
        }
      }
    }
    std::swap(current, next);
  }
  for (auto& w : current) {
    if (!w.empty()) words.push_back(std::move(w));
  }
}

}  // namespace medtune::tokenizer
