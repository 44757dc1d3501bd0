// The ranks of a data-parallel job and the few collectives training and evaluation need. One
// interface, three engines: a single process (world of 1, no library at all), MPI on the CPU
// (dist/mpi_communicator.cpp) and, in GPU builds, NCCL/RCCL for the gradient all-reduce
// (dist/gpu_collectives.cpp), bootstrapped through MPI. docs/distributed.md has the design.
//
// Every call is collective over all ranks unless it says otherwise; `what` names the exchange
// (e.g. "gradients of step 12") in the message a rank prints when its peers stop answering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace medtune::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the ranks on this machine (picks the GPU)
  virtual int local_size() const = 0;
  // "single", "mpi" or "mpi+nccl" / "mpi+rccl": recorded in the run manifest.
  virtual std::string backend_name() const = 0;

  // Point to point (the ordered, deterministic gradient sum): blocking.
  virtual void send(std::span<const std::byte> data, int to, const std::string& what) = 0;
  virtual void recv(std::span<std::byte> data, int from, const std::string& what) = 0;
  // data becomes root's data on every rank.
  virtual void broadcast(std::span<std::byte> data, int root, const std::string& what) = 0;
  // Element-wise sums over ranks, in place; the order of the additions is the engine's.
  virtual void allreduce_sum(std::span<float> data, const std::string& what) = 0;
  virtual void allreduce_sum(std::span<double> data, const std::string& what) = 0;
  virtual int64_t allreduce_max(int64_t value, const std::string& what) = 0;
  // Whether the engine reads and writes this rank's GPU memory itself (NCCL/RCCL): then
  // allreduce_sum_device takes the gradients where a device summed them. Otherwise a caller
  // holding device memory stages it through the host (TrainState::allreduce_gradients).
  virtual bool reads_device_memory() const { return false; }
  // allreduce_sum of n floats at `device_data` in this rank's GPU memory, in place. The caller has
  // finished writing them (its backend synchronized). Only where reads_device_memory().
  virtual void allreduce_sum_device(float* device_data, size_t n, const std::string& what);
  // Every rank's string, in rank order, on every rank (start-up checks, evaluation results).
  virtual std::vector<std::string> allgather(const std::string& mine, const std::string& what) = 0;
  virtual void barrier(const std::string& what) = 0;
  // Ends every rank of the job now with `code` (a rank that failed alone must not leave the
  // others waiting for it). The caller has printed why.
  [[noreturn]] virtual void abort_job(int code) = 0;
};

// The contiguous share [begin, end) of n items (questions, validation batches) that this rank
// works on: rank r takes items n*r/N .. n*(r+1)/N - 1, so the shares follow the single-process
// order and differ in size by at most one.
struct Share {
  size_t begin = 0, end = 0;
};
Share share_of(size_t n, const Communicator& comm);

// Broadcasts a string (any length) from root.
std::string broadcast_string(Communicator& comm, std::string s, int root, const std::string& what);

// The world of one process: collectives are no-ops.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void send(std::span<const std::byte>, int, const std::string& what) override;
  void recv(std::span<std::byte>, int, const std::string& what) override;
  void broadcast(std::span<std::byte>, int, const std::string&) override {}
  void allreduce_sum(std::span<float>, const std::string&) override {}
  void allreduce_sum(std::span<double>, const std::string&) override {}
  int64_t allreduce_max(int64_t value, const std::string&) override { return value; }
  std::vector<std::string> allgather(const std::string& mine, const std::string&) override { return {mine}; }
  void barrier(const std::string&) override {}
  [[noreturn]] void abort_job(int code) override;
};

}  // namespace medtune::dist
