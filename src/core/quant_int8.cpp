// Activation quantization, the scalar reference and the run-time choice of kernel for the int8
// route (quant_int8.h states the numerics every path reproduces).
#include "core/quant_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/quant_int8_kernels.h"

namespace medtune::int8 {

namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One weight block as integers w[32] plus its f16 scale d and (Q4_1) min m; returns the block's
// size in bytes.
int64_t weight_block(DType t, const uint8_t* blk, int w[kBlock], float* d, float* m) {
  *m = 0.0f;
  *d = load_f16(blk);
  switch (t) {
    case DType::Q8_0:
      for (int e = 0; e < kBlock; ++e) w[e] = static_cast<int8_t>(blk[2 + e]);
      return 34;
    case DType::Q4_0:
      for (int e = 0; e < kBlock / 2; ++e) {
        w[e] = (blk[2 + e] & 0xF) - 8;
        w[e + kBlock / 2] = (blk[2 + e] >> 4) - 8;
      }
      return 18;
    case DType::Q4_1:
      *m = load_f16(blk + 2);
      for (int e = 0; e < kBlock / 2; ++e) {
        w[e] = blk[4 + e] & 0xF;
        w[e + kBlock / 2] = blk[4 + e] >> 4;
      }
      return 20;
    default:
      throw Internal("int8 dot: no int8 kernel for " + std::string(dtype_name(t)));
  }
}

void dot_rows_scalar(DType t, const uint8_t* w, const BlockQ8* x, int64_t nb, int64_t ntok, float* y,
                     int64_t y_stride) {
  for (int64_t k = 0; k < ntok; ++k) y[k * y_stride] = dot_scalar(t, w, x + k * nb, nb);
}

int8_detail::DotRowsFn kernel_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni: return int8_detail::dot_rows_avx512vnni;
    case Isa::kAvxVnni: return int8_detail::dot_rows_avxvnni;
    case Isa::kAvx2: return int8_detail::dot_rows_avx2;
    case Isa::kScalar: break;
  }
  return dot_rows_scalar;
}

}  // namespace

bool supports(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1;
}

void quantize_activations(const float* x, int64_t n, BlockQ8* out) {
  if (n % kBlock != 0) throw Internal("int8 quantize_activations: n = " + std::to_string(n) + " is not a multiple of 32");
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
    BlockQ8& o = out[b];
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < kBlock; ++e) {
      finite = finite && std::isfinite(x[e]);
      amax = std::max(amax, std::fabs(x[e]));
    }
    if (!finite) {  // NaN or inf: a NaN result, as the fp32 path would give (quant_int8.h)
      o.d = o.s = std::nanf("");
      std::memset(o.q, 0, sizeof o.q);
      continue;
    }
    o.d = amax / 127.0f;
    const float id = o.d != 0.0f ? 1.0f / o.d : 0.0f;
    int sum = 0;
    for (int e = 0; e < kBlock; ++e) {
      // nearbyint: round half to even in the default rounding mode (what vroundps does).
      const float r = std::nearbyint(x[e] * id);
      const int q = static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
      o.q[e] = static_cast<int8_t>(q);
      sum += q;
    }
    o.s = o.d * static_cast<float>(sum);
  }
}

float dot_scalar(DType t, const uint8_t* w, const BlockQ8* x, int64_t nb) {
  float acc[8] = {};
  float macc = 0.0f;
  int wq[kBlock];
  for (int64_t b = 0; b < nb; ++b) {
    float d, m;
    w += weight_block(t, w, wq, &d, &m);
    const float scale = d * x[b].d;
    for (int j = 0; j < 8; ++j) {
      int32_t p = 0;  // exact: |p| <= 4 * 128 * 127
      for (int e = 4 * j; e < 4 * j + 4; ++e) p += wq[e] * x[b].q[e];
      acc[j] = std::fma(scale, static_cast<float>(p), acc[j]);
    }
    if (t == DType::Q4_1) macc = std::fma(m, x[b].s, macc);
  }
  float half[4];
  for (int j = 0; j < 4; ++j) half[j] = acc[j] + acc[j + 4];
  const float sum = (half[0] + half[2]) + (half[1] + half[3]);
  return sum + macc;
}

void dot_rows_with(Isa isa, DType t, const uint8_t* w, const BlockQ8* x, int64_t nb, int64_t ntok,
                   float* y, int64_t y_stride) {
  if (!supports(t)) throw Internal("int8 dot: no int8 kernel for " + std::string(dtype_name(t)));
  if (!cpu_supports(isa)) throw Internal(std::string("int8 dot: this CPU cannot run ") + isa_name(isa));
  kernel_of(isa)(t, w, x, nb, ntok, y, y_stride);
}

Isa kernel_isa() {
  return active_isa();
}

void dot_rows(DType t, const uint8_t* w, const BlockQ8* x, int64_t nb, int64_t ntok, float* y,
              int64_t y_stride) {
  static const int8_detail::DotRowsFn kernel = kernel_of(kernel_isa());
  if (!supports(t)) throw Internal("int8 dot: no int8 kernel for " + std::string(dtype_name(t)));
  kernel(t, w, x, nb, ntok, y, y_stride);
}

}  // namespace medtune::int8
