// for_blocks_balanced (ops/cpu/balanced_blocks.h): every block exactly once whatever the thread
// count and block count, and a slow thread's share finished by the others.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ops/cpu/balanced_blocks.h"

namespace medtune::ops {
namespace {

struct ThreadCount {
  explicit ThreadCount(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
  int saved;
};

TEST(BalancedBlocks, EveryBlockOnce) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadCount tc(threads);
    for (int64_t n : {0, 1, 2, 3, 5, 8, 13, 64, 100, 1001}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      for_blocks_balanced(n, [&](int64_t b) {
        ASSERT_GE(b, 0);
        ASSERT_LT(b, n);
        seen[static_cast<size_t>(b)].fetch_add(1);
      });
      for (int64_t b = 0; b < n; ++b)
        EXPECT_EQ(seen[static_cast<size_t>(b)].load(), 1)
            << threads << " threads, " << n << " blocks, block " << b;
    }
  }
}

// Called inside a parallel region (nested regions get one thread): that thread takes every share.
TEST(BalancedBlocks, NestedInAParallelRegion) {
  ThreadCount tc(4);
  constexpr int64_t n = 37;
  std::vector<std::atomic<int>> seen(n);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    for_blocks_balanced(n, [&](int64_t b) { seen[static_cast<size_t>(b)].fetch_add(1); });
  }
  for (int64_t b = 0; b < n; ++b) EXPECT_EQ(seen[static_cast<size_t>(b)].load(), 1) << b;
}

// Thread 0 is held in its first block until the others have done every block outside the chunk
// it holds (4 blocks, taken before the call): thread 1 must take the rest of thread 0's share. With
// static shares thread 0 would compute 100 of the 200 blocks (after waiting out its 20 s).
TEST(BalancedBlocks, OthersFinishASlowThreadsShare) {
  if (omp_get_thread_limit() < 2) GTEST_SKIP() << "one OpenMP thread";
  ThreadCount tc(2);
  constexpr int64_t n = 200;
  std::vector<std::atomic<int>> seen(n);
  std::atomic<int64_t> done{0}, by_thread0{0};
  std::atomic<bool> held{false};
  for_blocks_balanced(n, [&](int64_t b) {
    if (omp_get_thread_num() == 0 && !held.exchange(true)) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() < n - 4 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (omp_get_thread_num() == 0) by_thread0.fetch_add(1);
    seen[static_cast<size_t>(b)].fetch_add(1);
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), n);
  for (int64_t b = 0; b < n; ++b) EXPECT_EQ(seen[static_cast<size_t>(b)].load(), 1) << b;
  EXPECT_LE(by_thread0.load(), 4);  // its first chunk at most (none if thread 1 took it all first)
}

}  // namespace
}  // namespace medtune::ops
