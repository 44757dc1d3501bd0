#include "dist/gpu_collectives.h"

#if MEDTUNE_GPU_WITH_COLLECTIVES

#include <cstdlib>

#include "gpu/collectives.h"

namespace medtune::dist {

namespace {

class GpuCollectives final : public Communicator {
 public:
  GpuCollectives(Communicator& host, int device) : host_(host), coll_(bootstrap(host), host.rank(), host.size(), device) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  std::string backend_name() const override { return host_.backend_name() + "+" + gpu::collectives_name(); }
  void send(std::span<const std::byte> d, int to, const std::string& what) override { host_.send(d, to, what); }
  void recv(std::span<std::byte> d, int from, const std::string& what) override { host_.recv(d, from, what); }
  void broadcast(std::span<std::byte> d, int root, const std::string& what) override { host_.broadcast(d, root, what); }
  void allreduce_sum(std::span<float> data, const std::string&) override { coll_.allreduce_sum(data.data(), data.size()); }
  void allreduce_sum(std::span<double> data, const std::string& what) override { host_.allreduce_sum(data, what); }
  bool reads_device_memory() const override { return true; }
  void allreduce_sum_device(float* device_data, size_t n, const std::string&) override {
    coll_.allreduce_sum_device(device_data, n);
  }
  int64_t allreduce_max(int64_t v, const std::string& what) override { return host_.allreduce_max(v, what); }
  std::vector<std::string> allgather(const std::string& mine, const std::string& what) override {
    return host_.allgather(mine, what);
  }
  void barrier(const std::string& what) override { host_.barrier(what); }
  [[noreturn]] void abort_job(int code) override {
    host_.abort_job(code);
    std::_Exit(code);  // not reached; a virtual call does not carry [[noreturn]] for the compiler
  }

 private:
  // ncclGetUniqueId on rank 0, broadcast over MPI.
  static gpu::CollectiveId bootstrap(Communicator& host) {
    gpu::CollectiveId id{};
    if (host.rank() == 0) id = gpu::new_collective_id();
    host.broadcast(std::as_writable_bytes(std::span<char>(id.data(), id.size())), 0, "the NCCL/RCCL unique id");
    return id;
  }
  Communicator& host_;
  gpu::Collective coll_;
};

}  // namespace

std::unique_ptr<Communicator> with_gpu_collectives(Communicator& host, int device) {
  return std::make_unique<GpuCollectives>(host, device);
}

}  // namespace medtune::dist

#else

namespace medtune::dist {
std::unique_ptr<Communicator> with_gpu_collectives(Communicator&, int) { return nullptr; }
}  // namespace medtune::dist

#endif
