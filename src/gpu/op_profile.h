// Where a GPU step's time goes, op by op, without a profiler on the machine (the lent GPU
// machines have no Nsight Systems): with MEDTUNE_GPU_PROFILE=1 in the environment, each backend
// op waits for the stream before and after it runs and its wall time is added to a table, which
// the backend prints to stderr when it is destroyed. The waits serialize host and device, so
// the table says where the time goes, not the throughput (bench_* without the variable does).
// Off (the default), a scope costs one branch.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/runtime.h"

namespace medtune::gpu {

class OpProfile {
 public:
  explicit OpProfile(const Stream& stream) : stream_(stream) {
    const char* v = std::getenv("MEDTUNE_GPU_PROFILE");
    on_ = v != nullptr && *v != '\0' && std::string(v) != "0";
  }
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  ~OpProfile() { print(); }

  class Scope {
   public:
    Scope(OpProfile* p, std::string name) : p_(p), name_(std::move(name)) {
      if (p_ == nullptr) return;
      p_->stream_.synchronize();  // what was queued before belongs to the ops before
      t0_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
      if (p_ == nullptr) return;
      try {
        p_->stream_.synchronize();
      } catch (...) {  // the op's own error is reported by the op's caller
      }
      Entry& e = p_->table_[name_];
      e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      ++e.calls;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfile* p_;
    std::string name_;
    std::chrono::steady_clock::time_point t0_;
  };

  // A scope timing `name`; `detail` (shapes) is appended only when profiling, so that the
  // string is never built otherwise.
  template <typename DetailFn>
  Scope time(const char* name, DetailFn detail) {
    if (!on_) return Scope(nullptr, {});
    return Scope(this, std::string(name) + detail());
  }
  Scope time(const char* name) { return time(name, [] { return std::string(); }); }

 private:
  struct Entry {
    double seconds = 0;
    long calls = 0;
  };
  void print() const {
    if (!on_ || table_.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(table_.begin(), table_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "medtune gpu op profile (MEDTUNE_GPU_PROFILE; stream waited for around each op)\n");
    std::fprintf(stderr, "%8s %8s %10s %6s  %s\n", "seconds", "calls", "ms/call", "share", "op");
    for (const auto& [name, e] : rows)
      std::fprintf(stderr, "%8.3f %8ld %10.3f %5.1f%%  %s\n", e.seconds, e.calls, 1e3 * e.seconds / static_cast<double>(e.calls),
                   100.0 * e.seconds / total, name.c_str());
    std::fprintf(stderr, "%8.3f %8s %10s %6s  all ops\n", total, "", "", "");
  }

  const Stream& stream_;
  bool on_ = false;
  std::map<std::string, Entry> table_;
};

}  // namespace medtune::gpu
