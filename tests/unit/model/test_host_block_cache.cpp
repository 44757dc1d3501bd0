// backend/host_block_cache.h: freed large blocks come back for the next request of their size,
// small ones and those past the cache's limit go back to the OS, and every block is aligned.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/host_block_cache.h"

namespace medtune::backend {
namespace {

constexpr size_t MiB = size_t{1} << 20;

TEST(HostBlockCache, AFreedLargeBlockServesTheNextRequestOfItsSize) {
  HostBlockCache c;
  void* a = c.allocate(48 * MiB + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % HostBlockCache::kAlign, 0u);
  std::memset(a, 1, 48 * MiB);
  c.deallocate(a);
  EXPECT_EQ(c.cached_bytes(), 48 * MiB + HostBlockCache::kAlign);
  void* b = c.allocate(48 * MiB);  // same rounded size class: the cached block
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.reused(), 1u);
  EXPECT_EQ(c.cached_bytes(), 0u);
  // A request more than a quarter smaller than the cached block does not take it.
  c.deallocate(b);
  void* small = c.allocate(30 * MiB);
  EXPECT_NE(small, a);
  EXPECT_EQ(c.reused(), 1u);
  c.deallocate(small);
}

TEST(HostBlockCache, SmallBlocksAndBlocksPastTheLimitAreNotKept) {
  HostBlockCache c;
  void* s = c.allocate(4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s) % HostBlockCache::kAlign, 0u);
  c.deallocate(s);
  EXPECT_EQ(c.cached_bytes(), 0u);
  // Up to the limit: two blocks of 300 MiB do not both fit in 512 MiB; the second is freed.
  void* a = c.allocate(300 * MiB);
  void* b = c.allocate(300 * MiB);
  c.deallocate(a);
  c.deallocate(b);
  EXPECT_EQ(c.cached_bytes(), 300 * MiB);
  EXPECT_LE(c.cached_bytes(), HostBlockCache::kMaxCachedBytes);
  c.deallocate(nullptr);
}

TEST(HostBlockCache, ThreadsAllocateAndFreeConcurrently) {
  HostBlockCache c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&c, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t bytes = (1 + static_cast<size_t>((i + t) % 3)) * MiB;
        auto* p = static_cast<unsigned char*>(c.allocate(bytes));
        p[0] = p[bytes - 1] = static_cast<unsigned char>(t);
        c.deallocate(p);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_GT(c.reused(), 0u);
  EXPECT_LE(c.cached_bytes(), HostBlockCache::kMaxCachedBytes);
}

}  // namespace
}  // namespace medtune::backend
