// Host memory for the CPU backend: 64-byte aligned blocks, with freed large blocks kept for reuse
// instead of going back to the OS.
//
// Why: a training step asks for the same large temporaries at every step (the loss head's chunk
// of logits, 256 x V fp32 = 48 MiB for SmolLM2; the layers' backward scratch; the checkpointed
// inputs), and glibc gives blocks above its mmap threshold (32 MiB at most, 128 KiB by default)
// back to the OS when they are freed. The next step page-faults them in again: on this
// project's VMs ~7 us per 4 KiB page, 90 ms of each thread's bf16 SmolLM2 step for the logits
// alone (BENCHMARKS.md, session 32). The GPU backend keeps a cache the same way.
//
// Blocks of at least kMinCachedBytes are cached when freed, while the cache holds at most
// kMaxCachedBytes; a request takes the smallest cached block of at least its size, wasting at
// most a quarter. What the cache holds counts in the process's resident memory: at most
// kMaxCachedBytes more than the live buffers. Thread-safe (the row shards allocate from their
// threads).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

namespace medtune::backend {

class HostBlockCache {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kMinCachedBytes = size_t{1} << 20;   // 1 MiB
  static constexpr size_t kMaxCachedBytes = size_t{512} << 20;  // 512 MiB

  HostBlockCache() = default;
  ~HostBlockCache();
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // bytes > 0; throws std::bad_alloc when the OS has no memory. Contents unspecified.
  void* allocate(size_t bytes);
  // p from allocate() (or null).
  void deallocate(void* p);

  size_t cached_bytes() const;  // held for reuse, not in use
  size_t reused() const;        // allocations served from the cache so far

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> large_;  // live blocks of at least kMinCachedBytes: size
  std::multimap<size_t, void*> free_;        // cached blocks by size
  size_t cached_ = 0, reused_ = 0;
};

// The one cache of the CPU backends (all precisions): never destroyed, so that arrays freed during
// static destruction (thread-local layer scratch, a static model) still find it.
HostBlockCache& host_blocks();

}  // namespace medtune::backend
