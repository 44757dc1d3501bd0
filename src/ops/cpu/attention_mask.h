// Which keys a query may see, shared by the attention forward and backward (reference and fast
// paths): causal, minus padding, and with sequence packing only the keys of the query's own
// example (a block-diagonal causal mask). Internal to src/ops/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "ops/cpu/vec_exp.h"
#include "ops/ops.h"

namespace medtune::ops::detail {

// Key j is visible to the query at absolute position p of row b when lo <= j <= p and it is not
// padding; lo = the first position of the query's example (0 without packing).
inline bool visible(const uint8_t* key_valid, int64_t b, int64_t Smax, int64_t j, int64_t lo,
                    int64_t p) {
  return j >= lo && j <= p && (key_valid == nullptr || key_valid[b * Smax + j] != 0);
}

// Queries per tile of the fast paths: a tile's scores span only the keys up to its last query,
// so the causal upper triangle is skipped except inside the diagonal tiles. 64 rows keep the
// tile's GEMMs efficient.
constexpr int64_t kQueryTile = 64;

// One row of scores (n of them, keys k0 .. k0 + n - 1) -> softmax probabilities in place, over
// the keys the query at absolute position p may see: the first `lim` (<= n) minus padding.
// Keys from lim on are set to 0 without an exp. A row with no visible key becomes all zeros.
inline void softmax_visible_row(float* row, int64_t n, int64_t lim, const uint8_t* key_valid,
                                int64_t b, int64_t Smax, int64_t k0, int64_t p) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float mx = kNegInf;
  if (k0 + lim - 1 <= p) {  // every key causally visible: only padding may hide one
    mx = row_max(row, lim, kNegInf, key_valid == nullptr ? nullptr : key_valid + b * Smax + k0);
  } else {
    for (int64_t c = 0; c < lim; ++c) {
      if (visible(key_valid, b, Smax, k0 + c, k0, p)) {
        mx = row[c] > mx ? row[c] : mx;  // as fmax for these finite scores, without the libm call
      } else {
        row[c] = kNegInf;
      }
    }
  }
  // exp(-inf) = 0 for hidden keys
  const float sum = mx != kNegInf ? exp_shifted_sum(row, lim, mx) : 0.0f;
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
  for (int64_t c = 0; c < lim; ++c) row[c] = sum > 0 ? row[c] * inv : 0.0f;
  std::fill(row + lim, row + n, 0.0f);
}

// The first key position query t of row b may see.
inline int64_t segment_lo(const int64_t* seg_start, int64_t b, int64_t T, int64_t t) {
  return seg_start == nullptr ? 0 : seg_start[b * T + t];
}

// End (exclusive) of the segment that starts at query row r0: the next row that starts an example,
// or T. Without packing the whole row is one segment.
inline int64_t segment_end(const int64_t* seg_start, int64_t b, int64_t T, int64_t r0) {
  if (seg_start == nullptr) return T;
  int64_t r1 = r0 + 1;
  while (r1 < T && seg_start[b * T + r1] != r1) ++r1;
  return r1;
}

// The longest segment of any row (T without packing): the size of the per-thread scratch blocks.
inline int64_t longest_segment(const int64_t* seg_start, int64_t B, int64_t T) {
  if (seg_start == nullptr) return T;
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r0 = 0; r0 < T;) {
      const int64_t r1 = segment_end(seg_start, b, T, r0);
      longest = std::max(longest, r1 - r0);
      r0 = r1;
    }
  return longest;
}

// Packed rows must be tiled by segments (what the fast paths rely on to skip the blocks between
// examples and to write each key's gradient once): seg_start[t] is t (an example starts) or
// seg_start[t - 1] (it continues), and there is no key history. A violation is a caller's bug.
inline void check_segments(const int64_t* seg_start, const AttentionShape& s, const char* op) {
  if (seg_start == nullptr) return;
  if (s.past != 0)
    throw Internal(std::string(op) + ": packed rows (seg_start) need past = 0, got " + std::to_string(s.past));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t) {
      const int64_t v = seg_start[b * s.T + t];
      if (v != t && (t == 0 || v != seg_start[b * s.T + t - 1]))
        throw Internal(std::string(op) + ": seg_start[" + std::to_string(b) + ", " + std::to_string(t) +
                       "] = " + std::to_string(v) + " does not start or continue a segment");
    }
}

}  // namespace medtune::ops::detail
