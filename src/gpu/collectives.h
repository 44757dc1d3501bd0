// NCCL (CUDA) or RCCL (ROCm) for the data-parallel gradient all-reduce (dist/communicator.h's GPU
// engine). Vendor-free: src/gpu/vendor.h maps the names; RCCL keeps NCCL's API, so one source
// serves both. Compiled only in GPU builds that found the library (cmake/gpu.cmake defines
// MEDTUNE_GPU_WITH_COLLECTIVES). Run as a 1-GPU world on an H200 (scripts/gpu-check.sh, stage
// nccl); never with several GPUs.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

namespace medtune::gpu {

// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES): made on rank 0, broadcast to the others (over MPI).
using CollectiveId = std::array<char, 128>;
CollectiveId new_collective_id();

// "nccl" or "rccl".
const char* collectives_name();

// One rank's NCCL/RCCL communicator on `device` (cudaSetDevice / hipSetDevice), with a device
// buffer and a stream of its own.
class Collective {
 public:
  Collective(const CollectiveId& id, int rank, int size, int device);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // Sums host `data` over the ranks, in place: copies it to the device, ncclAllReduce (sum, fp32),
  // copies back. For gradients summed on the host (the ordered exchange's ranks, and any float
  // buffer the trainer exchanges there).
  void allreduce_sum(float* data, size_t n);
  // Sums n floats of device memory over the ranks, in place (ncclAllReduce, sum, fp32), on this
  // communicator's stream, and waits for it. The caller's writes to it must be complete: the
  // training backend runs on a stream of its own, synchronized before this call.
  void allreduce_sum_device(float* device_data, size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace medtune::gpu
