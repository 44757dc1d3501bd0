// Dequantization of stored weights to fp32 (ops.h), bit-exact with the CPU:
//   F16/BF16   exact conversions;
//   Q8_0/Q4_0  x = q·d with |q| ≤ 128 and an f16 d (11-bit significand): the product is exact;
//   Q4_1       x = q·d + m: q·d exact, so one rounding whether or not it is contracted into an FMA;
//   NF4        x = code[q]·absmax: one fp32 product, one rounding.
// So any order and any contraction give the CPU's bits (src/core/quant.cpp states the same).
// One thread per output element; the block's bytes are read as bytes (little-endian), so no
// alignment beyond a byte is assumed of src.
// Q4_K and Q6_K (k-quants) are a later step.
#include <array>
#include <string>

#include "core/error.h"
#include "core/nf4.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

constexpr int64_t kQK = 32;  // ggml's legacy block: Q8_0, Q4_0, Q4_1
constexpr int64_t kQ8_0Bytes = 34, kQ4_0Bytes = 18, kQ4_1Bytes = 20;

// bitsandbytes' 16 NF4 values, passed by value from nf4::kCode (no second copy of the table).
struct Nf4Code {
  float v[16];
};

__device__ inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
__device__ inline float load_f32(const uint8_t* p) {
  const unsigned u = static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8) |
                     (static_cast<unsigned>(p[2]) << 16) | (static_cast<unsigned>(p[3]) << 24);
  return __uint_as_float(u);
}

__global__ void f16_kernel(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads())
    dst[i] = half_bits_to_float(load_u16(src + 2 * i));
}

__global__ void bf16_kernel(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads())
    dst[i] = bf16_bits_to_float(load_u16(src + 2 * i));
}

// Q8_0, 34 B / 32: d f16 | qs[32] int8.   x = q·d
__global__ void q8_0_kernel(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const uint8_t* blk = src + (i / kQK) * kQ8_0Bytes;
    const float d = half_bits_to_float(load_u16(blk));
    dst[i] = static_cast<float>(static_cast<int8_t>(blk[2 + i % kQK])) * d;
  }
}

// Q4_0, 18 B / 32: d f16 | qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
//   x = (q − 8)·d
__global__ void q4_0_kernel(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const uint8_t* blk = src + (i / kQK) * kQ4_0Bytes;
    const int j = static_cast<int>(i % kQK);
    const float d = half_bits_to_float(load_u16(blk));
    const int q = j < kQK / 2 ? (blk[2 + j] & 0xF) : (blk[2 + j - kQK / 2] >> 4);
    dst[i] = static_cast<float>(q - 8) * d;
  }
}

// Q4_1, 20 B / 32: d f16 | m f16 | qs[16], nibbles as Q4_0.   x = q·d + m
__global__ void q4_1_kernel(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const uint8_t* blk = src + (i / kQK) * kQ4_1Bytes;
    const int j = static_cast<int>(i % kQK);
    const float d = half_bits_to_float(load_u16(blk));
    const float m = half_bits_to_float(load_u16(blk + 2));
    const int q = j < kQK / 2 ? (blk[4 + j] & 0xF) : (blk[4 + j - kQK / 2] >> 4);
    dst[i] = static_cast<float>(q) * d + m;
  }
}

// NF4 row blocks, 36 B / 64: f32 absmax | 32 bytes, element 2k in the HIGH nibble of byte k.
//   x = code[q]·absmax
__global__ void nf4_kernel(const uint8_t* src, float* dst, int64_t n, Nf4Code code) {
  for (int64_t i = thread_index(); i < n; i += grid_threads()) {
    const uint8_t* blk = src + (i / nf4::kBlock) * nf4::kRowBlockBytes;
    const int j = static_cast<int>(i % nf4::kBlock);
    const uint8_t byte = blk[4 + j / 2];
    const int q = (j % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
    dst[i] = code.v[q] * load_f32(blk);
  }
}

}  // namespace

bool dequantize_supported(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::NF4: return true;
    default: return false;
  }
}

void dequantize(DType t, const void* src, float* dst, int64_t n, const Stream& stream) {
  if (!dequantize_supported(t))
    throw Internal("gpu::dequantize: " + std::string(dtype_name(t)) + " is not implemented on the GPU yet");
  if (n < 0 || n % dtype_block_elems(t) != 0)
    throw Internal("gpu::dequantize: n = " + std::to_string(n) + " is not a multiple of the " +
                   std::string(dtype_name(t)) + " block size");
  if (n == 0) return;
  const auto* s = static_cast<const uint8_t*>(src);
  const unsigned grid = blocks_for(n);
  const gpuStream_t st = stream_of(stream);
  switch (t) {
    case DType::F32: copy_device_to_device(dst, src, static_cast<size_t>(n) * 4, stream); return;
    case DType::F16: f16_kernel<<<grid, kThreads, 0, st>>>(s, dst, n); break;
    case DType::BF16: bf16_kernel<<<grid, kThreads, 0, st>>>(s, dst, n); break;
    case DType::Q8_0: q8_0_kernel<<<grid, kThreads, 0, st>>>(s, dst, n); break;
    case DType::Q4_0: q4_0_kernel<<<grid, kThreads, 0, st>>>(s, dst, n); break;
    case DType::Q4_1: q4_1_kernel<<<grid, kThreads, 0, st>>>(s, dst, n); break;
    case DType::NF4: {
      Nf4Code code{};
      for (int k = 0; k < 16; ++k) code.v[k] = nf4::kCode[static_cast<size_t>(k)];
      nf4_kernel<<<grid, kThreads, 0, st>>>(s, dst, n, code);
      break;
    }
    default: break;  // excluded above
  }
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
