// Bin packing for sample_packing: which examples share a row of sequence_len tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace medtune::train {

// First-fit decreasing. The items `order` lists (indices into sizes) are stably sorted by size,
// largest first (so ties keep their order in `order`), and each goes into the first bin whose free
// space holds it, a new bin when none does. Returns the bins in the order they were opened, each
// listing its items in placement order. Every size must lie in [0, capacity] (Internal otherwise).
// O(n log n): a max-tree over the bins' free space finds the first bin that fits.
// FFD uses at most 11/9·OPT + 6/9 bins (Dósa 2007).
std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& sizes,
                                                       std::vector<int64_t> order, int64_t capacity);

// Next fit over a list: items in list order fill a bin until the next one does not fit, which
// opens the next bin. Returns the bins as lists of positions in `sizes`.
std::vector<std::vector<int64_t>> next_fit(const std::vector<int64_t>& sizes, int64_t capacity);

}  // namespace medtune::train
