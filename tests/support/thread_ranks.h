// Ranks of a data-parallel job as threads of one test process, joined by an in-memory
// dist::Communicator, so that what ranks exchange can be checked without mpirun (what MPI does
// between processes is covered by tests/e2e/train_distributed.sh).
//
// Every collective is an all-gather underneath: each rank deposits its bytes, the last to arrive
// publishes them all in rank order, and each rank combines them itself. Sums add in rank order,
// the first rank's values copied (as MPI's and NCCL's do for one element from each rank, up to
// their own order). With reads_device_memory, allreduce_sum_device sums the floats at a device
// pointer in place, which works for testing::SimulatedDevice (its memory is host memory) and
// stands in for NCCL/RCCL reading the GPU's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/communicator.h"

namespace medtune::testing {

// What the ranks share: mailboxes for send/recv and the deposits of the collective in progress.
struct ThreadHub {
  explicit ThreadHub(int world) : size(world) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::vector<std::vector<std::byte>>> box;  // (from, to) -> messages
  std::vector<std::vector<std::byte>> deposits, published;
  int generation = 0, arrived = 0;
  int device_allreduces = 0;  // allreduce_sum_device calls, over all ranks
};

class ThreadRank final : public dist::Communicator {
 public:
  ThreadRank(ThreadHub& hub, int rank, bool reads_device_memory = false)
      : hub_(hub), rank_(rank), reads_device_(reads_device_memory) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return hub_.size; }
  std::string backend_name() const override { return reads_device_ ? "threads+device" : "threads"; }

  void send(std::span<const std::byte> data, int to, const std::string&) override {
    std::lock_guard<std::mutex> lock(hub_.mu);
    hub_.box[{rank_, to}].emplace_back(data.begin(), data.end());
    hub_.cv.notify_all();
  }
  void recv(std::span<std::byte> data, int from, const std::string& what) override {
    std::unique_lock<std::mutex> lock(hub_.mu);
    auto& q = hub_.box[{from, rank_}];
    hub_.cv.wait(lock, [&] { return !q.empty(); });
    if (q.front().size() != data.size()) fail("recv of " + what + ": message size differs");
    // std::copy, not memcpy: an empty message's data() may be null, which memcpy may not take.
    std::copy(q.front().begin(), q.front().end(), data.begin());
    q.erase(q.begin());
  }
  void broadcast(std::span<std::byte> data, int root, const std::string&) override {
    const auto all = gather(data);
    const auto& src = all[static_cast<size_t>(root)];
    if (src.size() != data.size()) fail("broadcast: the root's size differs");
    std::copy(src.begin(), src.end(), data.begin());
  }
  void allreduce_sum(std::span<float> data, const std::string&) override {
    sum_in_rank_order(data);
  }
  void allreduce_sum(std::span<double> data, const std::string&) override {
    sum_in_rank_order(data);
  }
  int64_t allreduce_max(int64_t value, const std::string&) override {
    int64_t m = value;
    for (const auto& d : gather(std::as_bytes(std::span<const int64_t>(&value, 1)))) {
      int64_t v = 0;
      std::memcpy(&v, d.data(), sizeof v);
      m = std::max(m, v);
    }
    return m;
  }
  std::vector<std::string> allgather(const std::string& mine, const std::string&) override {
    std::vector<std::string> out;
    for (const auto& d : gather(std::as_bytes(std::span<const char>(mine.data(), mine.size()))))
      out.emplace_back(reinterpret_cast<const char*>(d.data()), d.size());
    return out;
  }
  void barrier(const std::string&) override { gather({}); }
  bool reads_device_memory() const override { return reads_device_; }
  void allreduce_sum_device(float* device_data, size_t n, const std::string& what) override {
    if (!reads_device_) dist::Communicator::allreduce_sum_device(device_data, n, what);  // throws
    {
      std::lock_guard<std::mutex> lock(hub_.mu);
      ++hub_.device_allreduces;
    }
    sum_in_rank_order(std::span<float>(device_data, n));
  }
  [[noreturn]] void abort_job(int code) override {
    ADD_FAILURE() << "rank " << rank_ << " aborted the job with code " << code;
    std::abort();
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    ADD_FAILURE() << "rank " << rank_ << ": " << why;
    std::abort();
  }
  // Every rank's bytes, in rank order, on every rank.
  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine) {
    std::unique_lock<std::mutex> lock(hub_.mu);
    if (hub_.arrived == 0) hub_.deposits.assign(static_cast<size_t>(hub_.size), {});
    hub_.deposits[static_cast<size_t>(rank_)].assign(mine.begin(), mine.end());
    const int gen = hub_.generation;
    if (++hub_.arrived == hub_.size) {
      // A rank can enter the next collective only after every rank has arrived at this one, and
      // `published` is replaced only when all have arrived at the next: safe to read after waking.
      hub_.published = std::move(hub_.deposits);
      hub_.deposits.clear();
      hub_.arrived = 0;
      ++hub_.generation;
      hub_.cv.notify_all();
    } else {
      hub_.cv.wait(lock, [&] { return hub_.generation != gen; });
    }
    return hub_.published;
  }
  template <typename T>
  void sum_in_rank_order(std::span<T> data) {
    const auto all = gather(std::as_bytes(std::span<const T>(data.data(), data.size())));
    std::vector<T> acc(data.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != data.size_bytes()) fail("ranks reduce buffers of different sizes");
      const T* v = reinterpret_cast<const T*>(all[r].data());
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = r == 0 ? v[i] : acc[i] + v[i];
    }
    std::copy(acc.begin(), acc.end(), data.begin());
  }

  ThreadHub& hub_;
  int rank_;
  bool reads_device_;
};

// Runs body(comm) on hub.size threads, one rank each, and waits for all of them.
inline void run_thread_ranks(ThreadHub& hub, bool reads_device_memory,
                             const std::function<void(ThreadRank&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < hub.size; ++r)
    threads.emplace_back([&, r] {
      ThreadRank comm(hub, r, reads_device_memory);
      body(comm);
    });
  for (auto& t : threads) t.join();
}

}  // namespace medtune::testing
