// Host code only (the NCCL/RCCL API is host API), but a .cu file like the rest of src/gpu/ so
// that vendor.h's runtime names and the build's CUDA/HIP flags apply unchanged.
// Empty unless cmake/gpu.cmake found NCCL (CUDA) or RCCL (HIP) and defined
// MEDTUNE_GPU_WITH_COLLECTIVES: then multi-GPU ranks exchange through MPI on the host instead.
#if MEDTUNE_GPU_WITH_COLLECTIVES
#define MEDTUNE_GPU_COLLECTIVES 1
#include "gpu/collectives.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "gpu/vendor.h"

namespace medtune::gpu {

namespace {

void check_gpu(gpuError_t e, const char* call) {
  if (e != gpuSuccess) throw Internal(std::string(call) + ": " + gpuGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw Internal(std::string(collectives_name()) + " " + call + ": " + ncclGetErrorString(r));
}

}  // namespace

static_assert(sizeof(ncclUniqueId) == sizeof(CollectiveId), "ncclUniqueId is NCCL_UNIQUE_ID_BYTES (128) bytes");

const char* collectives_name() { return MEDTUNE_GPU_COLLECTIVES_NAME; }

CollectiveId new_collective_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  CollectiveId out;
  std::copy(id.internal, id.internal + sizeof id.internal, out.begin());
  return out;
}

struct Collective::Impl {
  ncclComm_t comm = nullptr;
  gpuStream_t stream = nullptr;
  float* buf = nullptr;  // (capacity) device copy of the buffer being summed
  size_t capacity = 0;
};

Collective::Collective(const CollectiveId& id, int rank, int size, int device) : impl_(std::make_unique<Impl>()) {
  check_gpu(gpuSetDevice(device), "set device");
  check_gpu(gpuStreamCreateWithFlags(&impl_->stream, gpuStreamNonBlocking), "stream create");
  ncclUniqueId nid;
  std::copy(id.begin(), id.end(), nid.internal);
  check_nccl(ncclCommInitRank(&impl_->comm, size, nid, rank), "ncclCommInitRank");
}

// Errors while tearing down are not reported: a destructor must not throw, and the process is
// ending its use of the device anyway.
Collective::~Collective() {
  if (impl_->buf != nullptr) static_cast<void>(gpuFree(impl_->buf));
  if (impl_->comm != nullptr) static_cast<void>(ncclCommDestroy(impl_->comm));
  if (impl_->stream != nullptr) static_cast<void>(gpuStreamDestroy(impl_->stream));
}

void Collective::allreduce_sum(float* data, size_t n) {
  if (n > impl_->capacity) {
    if (impl_->buf != nullptr) check_gpu(gpuFree(impl_->buf), "free");
    impl_->buf = nullptr;
    check_gpu(gpuMalloc(reinterpret_cast<void**>(&impl_->buf), n * sizeof(float)), "malloc");
    impl_->capacity = n;
  }
  check_gpu(gpuMemcpyAsync(impl_->buf, data, n * sizeof(float), gpuMemcpyHostToDevice, impl_->stream), "upload");
  check_nccl(ncclAllReduce(impl_->buf, impl_->buf, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream), "ncclAllReduce");
  check_gpu(gpuMemcpyAsync(data, impl_->buf, n * sizeof(float), gpuMemcpyDeviceToHost, impl_->stream), "download");
  check_gpu(gpuStreamSynchronize(impl_->stream), "synchronize");
}

}  // namespace medtune::gpu

#endif  // MEDTUNE_GPU_WITH_COLLECTIVES
