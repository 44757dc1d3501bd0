// The GPU op-test registry, in the spirit of llama.cpp's test-backend-ops: every case runs the CPU
// reference (the src/ops, src/core and src/train CPU functions) and the GPU kernel on the same
// random inputs, at tiny, odd (not multiples of a block or a warp) and realistic sizes, and checks
//   - guard words around every GPU output (nothing written outside it),
//   - NaN agreement (outputs are pre-filled with NaN bytes, so an element the kernel never wrote
//     shows up as a NaN where the reference has a number),
//   - the error metric against a tolerance whose derivation is written next to the case.
// Plain C++ (no GoogleTest): the GPU machine that runs it has a compiler, CMake and the GPU
// toolkit, and nothing else is guaranteed there.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu/runtime.h"

namespace medtune::gpu_test {

// One fp32 rounding: errors below are counted in units of u.
inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// ------------------------------------------------------------------------------ the registry
class Checks;
struct OpCase {
  std::string name;                               // "rmsnorm_forward/N=7,C=1000"
  bool quick = true;                              // run by --quick too (tiny and odd sizes)
  std::function<void(Checks&, const gpu::Stream&)> run;
};

// A check of host code that needs no GPU at all (e.g. loading NCCL and making an id): it runs
// where no device is visible too, so the GPU compile check exercises it on machines without one.
struct HostCase {
  std::string name;
  std::function<void(Checks&)> run;
};

class Registry {
 public:
  void add(std::string name, bool quick, std::function<void(Checks&, const gpu::Stream&)> run) {
    cases_.push_back({std::move(name), quick, std::move(run)});
  }
  void add_host(std::string name, std::function<void(Checks&)> run) {
    host_cases_.push_back({std::move(name), std::move(run)});
  }
  const std::vector<OpCase>& cases() const { return cases_; }
  const std::vector<HostCase>& host_cases() const { return host_cases_; }

 private:
  std::vector<OpCase> cases_;
  std::vector<HostCase> host_cases_;
};

// One registration function per op file (cases_*.cpp); register_all_cases (run.cpp) calls them
// all, for test_gpu_ops (main.cpp) and `medtune doctor` (apps/medtune/cmd_doctor.cpp) alike.
void register_runtime_cases(Registry& r);
void register_embedding_cases(Registry& r);
void register_rmsnorm_cases(Registry& r);
void register_rope_cases(Registry& r);
void register_swiglu_cases(Registry& r);
void register_cross_entropy_cases(Registry& r);
void register_adamw_cases(Registry& r);
void register_dequantize_cases(Registry& r);
void register_convert_cases(Registry& r);
void register_attention_cases(Registry& r);
void register_gemm_cases(Registry& r);
void register_gemv_cases(Registry& r);
void register_elementwise_cases(Registry& r);
void register_all_cases(Registry& r);
// The NCCL/RCCL cases (cases_collectives.cpp), apart: they need libnccl/librccl at run time.
void register_collective_cases(Registry& r);
bool collectives_compiled();  // the build found the NCCL/RCCL header

// --------------------------------------------------------------------------------- running
struct CaseResult {
  std::string name;
  bool ok = false;  // every check passed, and there was at least one
  double ms = 0;
  std::vector<std::string> lines;  // one per check ("  ok    ..." / "  FAIL  ...")
};
// Runs the registered cases whose name contains `filter` ("" = all; with `quick`, only the quick
// ones) on the current device and `stream`, one after another; an exception inside a case is a
// failed check. on_result (may be empty) sees each result as soon as it is known.
std::vector<CaseResult> run_cases(const Registry& r, bool quick, const std::string& filter,
                                  const gpu::Stream& stream,
                                  const std::function<void(const CaseResult&)>& on_result);
// Runs the registered host cases (no device needed), likewise.
std::vector<CaseResult> run_host_cases(const Registry& r, const std::function<void(const CaseResult&)>& on_result);

// --------------------------------------------------------------------------- device buffers
// n elements of T on the device with kGuard guard elements on each side. The guards hold the byte
// kGuardByte; the payload holds `fill` bytes until written (0xFF: every float is a NaN).
template <typename T>
class GuardedDevice {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr int kGuardByte = 0xA5;

  GuardedDevice(size_t n, const gpu::Stream& s, int fill = 0xFF)
      : buf_((n + 2 * kGuard) * sizeof(T)), n_(n) {
    gpu::fill_bytes(buf_.data(), kGuardByte, buf_.bytes(), s);
    gpu::fill_bytes(data(), fill, n * sizeof(T), s);
  }
  // Upload `host` (n elements) into the payload.
  GuardedDevice(const std::vector<T>& host, const gpu::Stream& s) : GuardedDevice(host.size(), s) {
    gpu::copy_to_device_sync(data(), host.data(), n_ * sizeof(T), s);
  }
  T* data() const { return buf_.as<T>() + kGuard; }
  size_t size() const { return n_; }

  std::vector<T> download(const gpu::Stream& s) const {
    std::vector<T> out(n_);
    gpu::copy_to_host_sync(out.data(), data(), n_ * sizeof(T), s);
    return out;
  }
  // True when no guard byte changed.
  bool guards_intact(const gpu::Stream& s) const {
    std::vector<unsigned char> all(buf_.bytes());
    gpu::copy_to_host_sync(all.data(), buf_.data(), all.size(), s);
    const size_t g = kGuard * sizeof(T), payload = n_ * sizeof(T);
    for (size_t i = 0; i < g; ++i)
      if (all[i] != kGuardByte || all[g + payload + i] != kGuardByte) return false;
    return true;
  }

 private:
  gpu::DeviceBuffer buf_;
  size_t n_;
};

// ---------------------------------------------------------------------------------- checking
// Collects the checks of one case; a case passes when every check does.
class Checks {
 public:
  // The GPU output's guard words are intact.
  template <typename T>
  void guards(const char* what, const GuardedDevice<T>& d, const gpu::Stream& s) {
    record(d.guards_intact(s), std::string(what) + ": guard words intact");
  }
  // NaN in the same places (a NaN on one side only is a failure, whatever the metric says).
  void nan_agreement(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref);
  // Normalized mean squared error Σ(gpu − ref)² / Σ ref² over the non-NaN elements ≤ tol.
  void nmse(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
            double tol);
  // Componentwise: |gpu_i − ref_i| ≤ bound_i for every i (a NaN on either side, where the other
  // is not, fails). Reports the largest |gpu − ref| / bound.
  void within(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
              const std::vector<double>& bound);
  // Identical bit patterns.
  void bit_exact(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref);
  void record(bool ok, const std::string& line);

  bool passed() const { return failures_ == 0; }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  int failures_ = 0;
  std::vector<std::string> lines_;
};

// ------------------------------------------------------------------------------ random inputs
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<float> random_normals(size_t n, uint64_t seed, float stddev = 1.0f);
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed);
// n elements of stored type t (dtype_row_bytes(t, n) bytes, n a multiple of t's block): random
// bytes, then every scale field (and, for F16/BF16, every value) made finite, since a NaN scale
// gives NaN outputs whose payload bits the vendors do not promise to keep. F32 stays raw bytes.
std::vector<uint8_t> random_stored(DType t, int64_t n, uint64_t seed);
// The CPU's decode of n elements of type t: medtune::dequantize_row (core/quant.h), or
// nf4::dequantize_blocks_scalar (core/nf4.h) for NF4, which dequantize_row does not take.
void decode_row_ref(DType t, const uint8_t* src, float* dst, int64_t n);

std::string shape(std::initializer_list<std::pair<const char*, int64_t>> dims);

}  // namespace medtune::gpu_test
