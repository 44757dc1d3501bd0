// The NCCL/RCCL all-reduce (gpu/collectives.h) as a world of one rank on device 0: what a single
// GPU can check of the multi-GPU gradient exchange (library loading, ncclGetUniqueId,
// ncclCommInitRank, the device buffer and its copies, ncclAllReduce on host-staged and on device
// memory). Not in register_all_cases:
// `medtune doctor` and the op tests must not need libnccl; `test_gpu_ops --collectives` runs
// these alone (scripts/gpu-check.sh stage 2b). Compiled to nothing in a build without the
// NCCL/RCCL header (cmake/gpu.cmake).
#include <algorithm>
#include <string>
#include <vector>

#include "op_test.h"

#if MEDTUNE_GPU_WITH_COLLECTIVES
#include "gpu/collectives.h"
#endif

namespace medtune::gpu_test {

#if MEDTUNE_GPU_WITH_COLLECTIVES
bool collectives_compiled() { return true; }
#else
bool collectives_compiled() { return false; }
#endif

void register_collective_cases([[maybe_unused]] Registry& r) {
#if MEDTUNE_GPU_WITH_COLLECTIVES
  // Host only (ncclGetUniqueId needs no GPU): loads the library and looks up every function.
  r.add_host("collectives/unique_id", [](Checks& c) {
    const gpu::CollectiveId id = gpu::new_collective_id();
    c.record(std::any_of(id.begin(), id.end(), [](char b) { return b != 0; }),
             std::string(gpu::collectives_name()) + ": ncclGetUniqueId filled the id");
  });
  // A world of one: the sum over the ranks is the buffer itself, bit for bit. The sizes are odd
  // and grow, shrink, then grow past the first: the device buffer is allocated, reused, replaced.
  r.add("collectives/one_rank_allreduce", true, [](Checks& c, const gpu::Stream&) {
    gpu::Collective coll(gpu::new_collective_id(), 0, 1, 0);
    uint64_t seed = 1;
    for (const size_t n : {size_t{1000003}, size_t{17}, size_t{3000001}}) {
      const std::vector<float> x = random_normals(n, seed++);
      std::vector<float> y = x;
      coll.allreduce_sum(y.data(), n);
      c.bit_exact(("allreduce of " + std::to_string(n) + " floats over 1 rank").c_str(), y, x);
    }
  });
  // The form the trainer uses when each rank summed its micro-batches on its GPU: ncclAllReduce
  // in place on device memory (guarded: nothing outside the n floats may change), after the
  // writes of another stream (the backend's) completed.
  r.add("collectives/one_rank_allreduce_device", true, [](Checks& c, const gpu::Stream& s) {
    gpu::Collective coll(gpu::new_collective_id(), 0, 1, 0);
    uint64_t seed = 11;
    for (const size_t n : {size_t{1000003}, size_t{17}}) {
      const std::vector<float> x = random_normals(n, seed++);
      GuardedDevice<float> d(x, s);
      coll.allreduce_sum_device(d.data(), n);
      c.bit_exact(("device allreduce of " + std::to_string(n) + " floats over 1 rank").c_str(), d.download(s), x);
      c.record(d.guards_intact(s), "device allreduce of " + std::to_string(n) + " floats: guards intact");
    }
  });
#endif
}

}  // namespace medtune::gpu_test
