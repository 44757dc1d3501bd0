// Devices, streams, buffers and copies (runtime.h) over the vendor runtime (vendor.h).
#include "gpu/runtime.h"

#include <cstdio>
#include <utility>

#include "gpu/check.h"
#include "gpu/launch.h"
#include "gpu/vendor.h"

namespace medtune::gpu {

namespace {

// Writes the kWarpSize this kernel was compiled with, so the host can compare it with the
// device's warp size: a HIP build for gfx90a (wave64) run on a wave32 chip, or the reverse, would
// otherwise compute wrong reductions silently.
__global__ void compiled_warp_size_kernel(int* out) { *out = kWarpSize; }

int compiled_warp_size() {
  Stream s;
  DeviceBuffer d(sizeof(int));
  compiled_warp_size_kernel<<<1, 1, 0, stream_of(s)>>>(d.as<int>());
  GPU_CHECK_LAUNCH();
  int w = 0;
  copy_to_host_sync(&w, d.data(), sizeof(int), s);
  return w;
}

}  // namespace

const char* backend_name() { return MEDTUNE_GPU_BACKEND_NAME; }

int device_count() {
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError();  // clear the non-sticky error so later calls start clean
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  const gpuError_t err = gpuGetDeviceCount(&n);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    return std::string(gpuGetErrorName(err)) + ": " + gpuGetErrorString(err);
  }
  return n == 0 ? "the runtime reports 0 devices" : "";
}

void set_device(int index) { GPU_CHECK(gpuSetDevice(index)); }

DeviceInfo device_info(int index) {
  GPU_CHECK(gpuSetDevice(index));
  gpuDeviceProp_t prop{};
  GPU_CHECK(gpuGetDeviceProperties(&prop, index));
  DeviceInfo d;
  d.index = index;
  d.name = prop.name;
#if defined(MEDTUNE_GPU_CUDA)
  d.arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
#else
  d.arch = prop.gcnArchName;
#endif
  d.warp_size = prop.warpSize;
  d.multiprocessors = prop.multiProcessorCount;
  size_t free_b = 0, total_b = 0;
  GPU_CHECK(gpuMemGetInfo(&free_b, &total_b));
  d.total_bytes = static_cast<int64_t>(total_b);
  d.free_bytes = static_cast<int64_t>(free_b);
  GPU_CHECK(gpuDriverGetVersion(&d.driver_version));
  GPU_CHECK(gpuRuntimeGetVersion(&d.runtime_version));
  const int compiled = compiled_warp_size();
  if (compiled != d.warp_size)
    throw Internal("GPU " + d.name + " (" + d.arch + ") runs warps of " +
                   std::to_string(d.warp_size) + " lanes but this build's kernels were compiled for " +
                   std::to_string(compiled) + "; rebuild for this architecture (docs/gpu.md)");
  return d;
}

std::string describe(const DeviceInfo& d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (%s, %d %s, warp %d, %.1f GiB, %.1f GiB free, driver %d, runtime %d)",
                d.name.c_str(), d.arch.c_str(), d.multiprocessors,
#if defined(MEDTUNE_GPU_CUDA)
                "SMs",
#else
                "CUs",
#endif
                d.warp_size, static_cast<double>(d.total_bytes) / (1024.0 * 1024.0 * 1024.0),
                static_cast<double>(d.free_bytes) / (1024.0 * 1024.0 * 1024.0), d.driver_version,
                d.runtime_version);
  return buf;
}

// ------------------------------------------------------------------------------------ Stream
Stream::Stream() {
  gpuStream_t s = nullptr;
  GPU_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  // A destructor must not throw; a failure here means the context is already broken, and the
  // call that broke it has reported that.
  if (handle_ != nullptr) (void)gpuStreamDestroy(static_cast<gpuStream_t>(handle_));
}

Stream::Stream(Stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)gpuStreamDestroy(static_cast<gpuStream_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { GPU_CHECK(gpuStreamSynchronize(stream_of(*this))); }

// ------------------------------------------------------------------------------ DeviceBuffer
DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const gpuError_t err = gpuMalloc(&ptr_, bytes);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    const std::string what = "GPU allocation of " + std::to_string(bytes) + " bytes failed: " + gpuGetErrorString(err);
    if (err == gpuErrorOutOfMemory) throw OutOfMemory(what);
    throw Internal(what);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) (void)gpuFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) (void)gpuFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ------------------------------------------------------------------------------------ copies
void copy_to_device(void* dst_device, const void* src_host, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  GPU_CHECK(gpuMemcpyAsync(dst_device, src_host, bytes, gpuMemcpyHostToDevice, stream_of(stream)));
}

void copy_to_host(void* dst_host, const void* src_device, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  GPU_CHECK(gpuMemcpyAsync(dst_host, src_device, bytes, gpuMemcpyDeviceToHost, stream_of(stream)));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToDevice, stream_of(stream)));
}

void copy_rows_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                  int64_t rows, int64_t cols, const Stream& stream) {
  if (rows < 0 || cols < 0 || dst_stride < cols || src_stride < cols)
    throw Internal("gpu::copy_rows_2d: " + std::to_string(rows) + " rows of " +
                   std::to_string(cols) + " floats do not fit the strides (dst " +
                   std::to_string(dst_stride) + ", src " + std::to_string(src_stride) + ")");
  if (rows == 0 || cols == 0) return;
  constexpr size_t f = sizeof(float);
  GPU_CHECK(gpuMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * f, src,
                             static_cast<size_t>(src_stride) * f, static_cast<size_t>(cols) * f,
                             static_cast<size_t>(rows), gpuMemcpyDeviceToDevice, stream_of(stream)));
}

void copy_to_device_sync(void* dst_device, const void* src_host, size_t bytes,
                         const Stream& stream) {
  copy_to_device(dst_device, src_host, bytes, stream);
  stream.synchronize();
}

void copy_to_host_sync(void* dst_host, const void* src_device, size_t bytes, const Stream& stream) {
  copy_to_host(dst_host, src_device, bytes, stream);
  stream.synchronize();
}

void fill_bytes(void* dst_device, int value, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  GPU_CHECK(gpuMemsetAsync(dst_device, value, bytes, stream_of(stream)));
}

}  // namespace medtune::gpu
