// Backend instances by device: one per device for the life of the process (a GPU backend holds
// the resident weights, its stream and BLAS handle; creating one per command would re-upload).
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "core/cpu_features.h"
#include "core/error.h"

#if defined(MEDTUNE_WITH_GPU)
#include "backend/gpu_factory.h"
#endif

namespace medtune::backend {

bool gpu_compiled() {
#if defined(MEDTUNE_WITH_GPU)
  return true;
#else
  return false;
#endif
}

const char* gpu_backend_name() {
#if defined(MEDTUNE_WITH_GPU)
  return gpu_toolkit_name();
#else
  return "";
#endif
}

Backend& for_device(const Device& d, Precision p) {
  if (d.is_cpu()) {
    // Settles the kernel path (and refuses a bad MEDTUNE_ISA with its message) here, before any
    // op could first ask for it inside an OpenMP region, where an exception cannot escape.
    (void)active_isa();
    if (p == Precision::kBf16) return cpu_bf16();
    return p == Precision::kInt8 ? cpu_int8() : cpu();
  }
  if (p == Precision::kInt8)
    throw BadInput("precision int8 runs on the CPU only (its kernels are x86 SIMD): use device cpu, or precision "
                   "bf16 or fp32 on " + d.str());
#if defined(MEDTUNE_WITH_GPU)
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  // Function-local statics are destroyed in the reverse order of their construction, and the
  // vendor runtime tears itself down at exit too (its own statics, or a handler registered by its
  // first calls). The map is built after the first backend, whose construction starts the
  // runtime, so that at exit the backends go first: their destructors wait on their streams
  // (on a runtime already gone HIP-CPU hangs there and CUDA fails) and print
  // MEDTUNE_GPU_PROFILE's table.
  std::unique_ptr<Backend> first;
  static bool started = false;
  if (!started) first = make_gpu_backend(d.index, p);
  static std::map<std::pair<int, Precision>, std::unique_ptr<Backend>> gpus;
  started = true;
  std::unique_ptr<Backend>& slot = gpus[{d.index, p}];
  if (!slot) slot = first ? std::move(first) : make_gpu_backend(d.index, p);
  return *slot;
#else
  throw BadInput("device " + d.str() +
                 ": this medtune was built without a GPU backend; configure with -DMEDTUNE_GPU=cuda "
                 "(NVIDIA) or -DMEDTUNE_GPU=hip (AMD), see docs/gpu.md, or use --device cpu");
#endif
}

}  // namespace medtune::backend
