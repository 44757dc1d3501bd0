// The GPU engine of dist/communicator.h: the gradient all-reduce through NCCL (CUDA) or RCCL
// (ROCm), bootstrapped through the job's MPI communicator (ncclGetUniqueId on rank 0, broadcast);
// everything else (start-up checks, stop flags, evaluation results) stays on MPI. Run only as a
// world of one GPU (an H200, docs/distributed.md); never with several GPUs.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace medtune::dist {

// `host` with allreduce_sum(float) done by NCCL/RCCL on GPU `device`; null when this build has
// no GPU collectives (a CPU build, or a GPU build without NCCL/RCCL: then MPI does it all).
// Collective over host's ranks.
std::unique_ptr<Communicator> with_gpu_collectives(Communicator& host, int device);

}  // namespace medtune::dist
