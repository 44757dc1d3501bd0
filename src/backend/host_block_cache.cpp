#include "backend/host_block_cache.h"

#include <cstdlib>
#include <new>

namespace medtune::backend {

HostBlockCache::~HostBlockCache() {
  for (auto& [bytes, p] : free_) std::free(p);
  // Live blocks belong to arrays that outlive the backend only through a caller's bug; they are
  // left to the OS at exit rather than freed under their owners.
}

void* HostBlockCache::allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = free_.lower_bound(rounded);
    if (it != free_.end() && it->first <= rounded + rounded / 4) {
      void* p = it->second;
      const size_t size = it->first;
      free_.erase(it);
      cached_ -= size;
      ++reused_;
      large_.emplace(p, size);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    large_.emplace(p, rounded);
  }
  return p;
}

void HostBlockCache::deallocate(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = large_.find(p);
    if (it != large_.end()) {
      const size_t size = it->second;
      large_.erase(it);
      if (cached_ + size <= kMaxCachedBytes) {
        free_.emplace(size, p);
        cached_ += size;
        return;
      }
    }
  }
  std::free(p);
}

size_t HostBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

HostBlockCache& host_blocks() {
  static HostBlockCache* const cache = new HostBlockCache;  // deliberately leaked (see the header)
  return *cache;
}

size_t HostBlockCache::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

}  // namespace medtune::backend
