// The GPU runtime seen from plain C++: devices, streams, device buffers and copies.
//
// This header (like ops.h) includes no vendor header, so host code compiled by g++ (tests, and
// later the trainer) can use the GPU backend without knowing whether it is CUDA or HIP; only the
// .cu files of src/gpu/ include vendor.h. Every call below throws medtune::Internal with the
// failing call's expression, file and line (check.h) when the runtime reports an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace medtune::gpu {

// "cuda" or "hip": which toolkit this build's GPU sources were compiled with.
const char* backend_name();

// Number of visible devices; 0 (never an exception) when there is no device or no driver, so
// that callers can skip GPU work on a machine without one.
int device_count();
// Why device_count() is 0 (the runtime's message), or "" when devices are visible.
std::string no_device_reason();

struct DeviceInfo {
  int index = 0;
  std::string name;           // "NVIDIA H200", "AMD Instinct MI250X"
  std::string arch;           // "sm_90" (compute capability) or gcnArchName "gfx90a:sramecc+:xnack-"
  int warp_size = 0;          // 32 on NVIDIA, 64 on AMD CDNA
  int multiprocessors = 0;    // SMs / CUs
  int64_t total_bytes = 0;    // device memory
  int64_t free_bytes = 0;     // at the time of the query
  int driver_version = 0;     // as the runtime encodes it (CUDA: 1000*major + 10*minor)
  int runtime_version = 0;
};
// Queries device `index` (makes it current). Also checks that the warp size the kernels were
// compiled for matches the device's (throws Internal naming the chip otherwise).
DeviceInfo device_info(int index);
// One line for logs: "NVIDIA H200 (sm_90, 132 SMs, warp 32, 139.8 GiB, driver 13.0)".
std::string describe(const DeviceInfo& d);

void set_device(int index);

// An asynchronous stream (non-blocking with respect to the legacy default stream). Every kernel
// wrapper in ops.h takes one; move-only.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void synchronize() const;
  // The vendor's stream (cudaStream_t / hipStream_t), for the .cu files.
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// The device had too little memory for an allocation (the runtime's out-of-memory error, not
// any other failure): the backend turns it into a message naming the device and what it holds.
class OutOfMemory : public Internal {
 public:
  using Internal::Internal;
};

// Device memory, freed in the destructor; move-only. Allocation failure throws OutOfMemory when
// the device is out of memory and Internal otherwise (both with the size asked for). bytes == 0
// holds no memory and a null pointer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Copies on `stream`, ordered with the kernels on it. The *_sync forms wait for the stream, so the
// host buffer may be reused (or read) as soon as they return.
void copy_to_device(void* dst_device, const void* src_host, size_t bytes, const Stream& stream);
void copy_to_host(void* dst_host, const void* src_device, size_t bytes, const Stream& stream);
void copy_device_to_device(void* dst, const void* src, size_t bytes, const Stream& stream);
void copy_to_device_sync(void* dst_device, const void* src_host, size_t bytes, const Stream& stream);
void copy_to_host_sync(void* dst_host, const void* src_device, size_t bytes, const Stream& stream);
// Strided device-to-device copy of fp32 rows: dst[r*dst_stride + c] = src[r*src_stride + c] for
// r < rows, c < cols; the elements of dst between rows are left as they are. Strides and cols in
// floats, cols <= each stride (Internal otherwise). E.g. appending a (B, T, KVD) key block into a
// (B, Smax, KVD) cache at position `past`: copy_rows_2d(cache + past*KVD, Smax*KVD, k, T*KVD, B,
// T*KVD, stream). dst and src must not overlap.
void copy_rows_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                  int64_t rows, int64_t cols, const Stream& stream);
// Sets `bytes` bytes to `value` (a byte).
void fill_bytes(void* dst_device, int value, size_t bytes, const Stream& stream);

}  // namespace medtune::gpu
