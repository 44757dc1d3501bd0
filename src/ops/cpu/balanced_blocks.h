// for_blocks_balanced(n, fn): fn(b) once for every block b in [0, n), over the OpenMP threads as
// schedule(static) deals them (one contiguous share each, read as one stream), except that a
// thread whose share is done takes chunks from the end of another's. On a shared machine one
// core is often slower for a while; with static shares the other then waits at the loop's end
// (BENCHMARKS.md, session 44: 8-10% of a 2-thread int8 decode in libgomp, on each thread).
// schedule(dynamic) balances too, but deals neighbouring blocks to different threads, whose
// streams and prefetches then interleave: 0.67x decode there; guided, 0.94-0.96x.
//
// Which thread computes a block changes nothing in its result: the callers' blocks are disjoint
// rows, each computed by the same code wherever it runs.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace medtune::ops {

namespace balanced_detail {

// A thread's share [front, back) in one atomic word (two 32-bit halves), so that the owner taking
// from the front and a thief taking from the back agree on who took what with one compare-exchange.
struct alignas(64) Share {
  std::atomic<uint64_t> range{0};
};

inline uint64_t pack(uint32_t front, uint32_t back) {
  return (uint64_t{back} << 32) | front;
}

// Takes up to k blocks from the front (owner) or the back (thief) of s; [first, first + count).
inline uint32_t take(Share& s, bool from_front, uint32_t k, uint32_t& first) {
  uint64_t cur = s.range.load(std::memory_order_relaxed);
  for (;;) {
    const auto front = static_cast<uint32_t>(cur), back = static_cast<uint32_t>(cur >> 32);
    if (front >= back) return 0;
    const uint32_t count = std::min(k, back - front);
    const uint64_t next = from_front ? pack(front + count, back) : pack(front, back - count);
    if (s.range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      first = from_front ? front : back - count;
      return count;
    }
  }
}

}  // namespace balanced_detail

// The owner takes kOwnChunk blocks at a time (one atomic operation per chunk); a thief takes
// kStealChunk from the end of the first share it finds unfinished.
template <typename Fn>
void for_blocks_balanced(int64_t n, Fn&& fn) {
  using namespace balanced_detail;
  constexpr uint32_t kOwnChunk = 4, kStealChunk = 2;
  if (n <= 0) return;
  const int used = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), n));
  if (used <= 1 || n > INT32_MAX) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; ++b) fn(b);
    return;
  }
  Share local[16];  // one per thread (on the heap beyond 16 threads)
  std::unique_ptr<Share[]> heap;
  Share* shares =
      used <= 16 ? local : (heap = std::make_unique<Share[]>(static_cast<size_t>(used))).get();
  for (int t = 0; t < used; ++t) {  // schedule(static)'s shares
    const auto front = static_cast<uint32_t>(n * t / used),
               back = static_cast<uint32_t>(n * (t + 1) / used);
    shares[t].range.store(pack(front, back), std::memory_order_relaxed);
  }
  // With fewer threads than asked (nested in a parallel region), the ones there take every share.
#pragma omp parallel num_threads(used)
  {
    const int me = omp_get_thread_num();
    uint32_t first = 0;
    for (uint32_t c; (c = take(shares[me], true, kOwnChunk, first)) > 0;)
      for (uint32_t b = first; b < first + c; ++b) fn(static_cast<int64_t>(b));
    for (int d = 1; d < used; ++d) {
      Share& victim = shares[(me + d) % used];
      for (uint32_t c; (c = take(victim, false, kStealChunk, first)) > 0;)
        for (uint32_t b = first; b < first + c; ++b) fn(static_cast<int64_t>(b));
    }
  }
}

}  // namespace medtune::ops
