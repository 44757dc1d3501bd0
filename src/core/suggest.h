// "Did you mean" suggestions for misspelled names (config keys, subcommands, options).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace medtune {

// Edit distance (insertions, deletions, substitutions).
inline size_t levenshtein(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest candidate within distance 3 (the first one on ties), or "".
template <typename Names>
std::string closest(std::string_view word, const Names& candidates) {
  std::string best;
  size_t best_d = 4;
  for (const auto& c : candidates) {
    const size_t d = levenshtein(word, c);
    if (d < best_d) best_d = d, best = std::string(c);
  }
  return best;
}

}  // namespace medtune
