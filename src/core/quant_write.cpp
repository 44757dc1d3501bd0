#include "core/quant_write.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace medtune {

void quantize_row_q8_0(const float* src, uint8_t* dst, int64_t n) {
  constexpr int64_t kBlock = 32;
  if (n % kBlock != 0) throw Internal("quantize_row_q8_0: n is not a multiple of 32");
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* x = src + b * kBlock;
    uint8_t* y = dst + b * 34;
    float amax = 0.0f;
    for (int64_t j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    // Same fp32 operations in the same order as ggml and gguf-py: d = amax / 127, id = 1 / d.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(y, &dh, 2);
    for (int64_t j = 0; j < kBlock; ++j) {
      // roundf: halves away from zero (gguf-py's np_roundf computes the same).
      const float q = std::round(x[j] * id);
      y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

std::vector<uint8_t> encode_f32(DType t, const float* src, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0) throw Internal("encode_f32: bad shape");
  const int64_t n = rows * cols;
  std::vector<uint8_t> out;
  switch (t) {
    case DType::F32:
      out.resize(static_cast<size_t>(n) * 4);
      std::memcpy(out.data(), src, out.size());
      return out;
    case DType::F16:
    case DType::BF16: {
      out.resize(static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = t == DType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      return out;
    }
    case DType::Q8_0:
      if (cols % 32 != 0) throw Internal("encode_f32: Q8_0 rows must be multiples of 32");
      out.resize(static_cast<size_t>(n / 32 * 34));
      for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0(src + r * cols, out.data() + r * cols / 32 * 34, cols);
      return out;
    default:
      throw Internal("encode_f32: cannot encode " + std::string(dtype_name(t)));
  }
}

}  // namespace medtune
