// Dequantization of stored weights to fp32 (ops.h), bit-exact with the CPU: the per-element
// decode, and why it is bit-exact whatever the order or contraction, is in gpu/decode.h (shared
// with embedding_rows, embedding.cu). One thread per output element.
#include <string>

#include "core/error.h"
#include "gpu/decode.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

using decode_detail::Nf4Code;

template <DType T>
__global__ void dequantize_kernel(const uint8_t* src, float* dst, int64_t n, Nf4Code code) {
  for (int64_t i = thread_index(); i < n; i += grid_threads())
    dst[i] = decode_detail::decode<T>(src, i, code);
}

}  // namespace

bool dequantize_supported(DType t) { return decode_detail::supported(t); }

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
  const Nf4Code code = t == DType::NF4 ? decode_detail::nf4_code() : Nf4Code{};
  const auto launch = [&](auto type) {
    dequantize_kernel<decltype(type)::value><<<grid, kThreads, 0, st>>>(s, dst, n, code);
  };
  if (t == DType::F32) {  // as stored: a copy
    copy_device_to_device(dst, src, static_cast<size_t>(n) * 4, stream);
    return;
  }
  decode_detail::dispatch(t, launch);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
