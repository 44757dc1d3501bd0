// Host code only (the NCCL/RCCL API is host API), but a .cu file like the rest of src/gpu/ so
// that vendor.h's runtime names and the build's CUDA/HIP flags apply unchanged.
// Empty unless cmake/gpu.cmake found the NCCL (CUDA) or RCCL (HIP) header and defined
// MEDTUNE_GPU_WITH_COLLECTIVES: then multi-GPU ranks exchange through MPI on the host instead.
//
// The library is opened at run time (dlopen), on the first multi-GPU job, not linked: libnccl is
// 218 MB, every other command and a single-GPU run never need it, and a binary linked to it would
// not even start on a GPU machine without it (the GPU check's bundle carries no NCCL). The header
// gives the types; only the five functions below are looked up.
#if MEDTUNE_GPU_WITH_COLLECTIVES
#define MEDTUNE_GPU_COLLECTIVES 1
#include "gpu/collectives.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "gpu/vendor.h"

namespace medtune::gpu {

namespace {

void check_gpu(gpuError_t e, const char* call) {
  if (e != gpuSuccess) throw Internal(std::string(call) + ": " + gpuGetErrorString(e));
}
// The shared library's soname: NCCL 2's and RCCL's (ROCm 5 and 6).
#if defined(MEDTUNE_GPU_CUDA)
constexpr const char* kLibrary = "libnccl.so.2";
#else
constexpr const char* kLibrary = "librccl.so.1";
#endif

// The functions medtune calls, looked up once; the types are the header's own declarations.
struct Api {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
};

template <typename F>
void lookup(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr)
    throw BadInput(std::string(kLibrary) + " has no " + name + " (an NCCL/RCCL older than 2.x?)");
}

// Opened on first use and kept for the life of the process (never dlclose'd: communicators may
// still hold its threads at exit). BadInput, naming the library, when it cannot be loaded.
const Api& api() {
  static const Api loaded = [] {
    void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      throw BadInput(std::string("ranks on GPUs sum their gradients with ") + collectives_name() + ", and " +
                     kLibrary + " cannot be loaded (" + (why != nullptr ? why : "unknown reason") +
                     "): install it, or put its directory on LD_LIBRARY_PATH");
    }
    Api a;
    lookup(lib, a.get_error_string, "ncclGetErrorString");
    lookup(lib, a.get_unique_id, "ncclGetUniqueId");
    lookup(lib, a.comm_init_rank, "ncclCommInitRank");
    lookup(lib, a.comm_destroy, "ncclCommDestroy");
    lookup(lib, a.all_reduce, "ncclAllReduce");
    return a;
  }();
  return loaded;
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess)
    throw Internal(std::string(collectives_name()) + " " + call + ": " + api().get_error_string(r));
}

}  // namespace

static_assert(sizeof(ncclUniqueId) == sizeof(CollectiveId), "ncclUniqueId is NCCL_UNIQUE_ID_BYTES (128) bytes");

const char* collectives_name() { return MEDTUNE_GPU_COLLECTIVES_NAME; }

CollectiveId new_collective_id() {
  ncclUniqueId id;
  check_nccl(api().get_unique_id(&id), "ncclGetUniqueId");
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
  check_nccl(api().comm_init_rank(&impl_->comm, size, nid, rank), "ncclCommInitRank");
}

// Errors while tearing down are not reported: a destructor must not throw, and the process is
// ending its use of the device anyway.
Collective::~Collective() {
  if (impl_->buf != nullptr) static_cast<void>(gpuFree(impl_->buf));
  if (impl_->comm != nullptr) static_cast<void>(api().comm_destroy(impl_->comm));
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
  check_nccl(api().all_reduce(impl_->buf, impl_->buf, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream),
             "ncclAllReduce");
  check_gpu(gpuMemcpyAsync(data, impl_->buf, n * sizeof(float), gpuMemcpyDeviceToHost, impl_->stream), "download");
  check_gpu(gpuStreamSynchronize(impl_->stream), "synchronize");
}

void Collective::allreduce_sum_device(float* device_data, size_t n) {
  check_nccl(api().all_reduce(device_data, device_data, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream),
             "ncclAllReduce");
  check_gpu(gpuStreamSynchronize(impl_->stream), "synchronize");
}

}  // namespace medtune::gpu

#endif  // MEDTUNE_GPU_WITH_COLLECTIVES
