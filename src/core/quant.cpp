// Dequantization and fused dequantize-dot of stored weights.
//
// Two paths, always both compiled where the CPU allows:
//   - a plain scalar reference (quant_detail::*_scalar), written to read like ggml's
//     dequantize_row_* in ggml-quants.c, and
//   - an AVX2/FMA/F16C path (quant_avx2.cpp, compiled with those flags whatever the baseline)
//     used by dequantize_row / dot_row when this CPU has them (core/cpu_features.h: run-time
//     dispatch, capped by MEDTUNE_ISA=scalar).
// dequantize_row is bit-exact on both paths and with ggml's reference (and gguf-py's numpy port):
// every value is computed with the same fp32 operations in the same order. Whether the compiler
// contracts a multiply and an add into an FMA cannot change a result either, because every
// product involved is exact in fp32: an f16 scale has an 11-bit significand, so d*q (q of 4, 5 or
// 8 bits), d*sc and dmin*m (6-bit sc, m) and then (d*sc)*q (4 or 5 bits) need at most 22 bits;
// only the final add/subtract rounds. (Q6_K's (d*sc)*q, up to 25 bits, rounds once and has no add.)
// One caveat, F16 only: F16C conversion quiets a signalling NaN (as ggml does on x86), the scalar
// path keeps it (as numpy does). No weight is a NaN; every other value is identical.
// dot_row fuses dequantization into the dot product (no temporary row): it may round differently
// from "dequantize, then dot" only through the order of the fp32 sums and, for Q8_0/Q4_0/Q6_K,
// by applying the block scale to the block's partial sum (d * sum(q*x)) instead of to each q.
// For Q4_1/Q4_K it forms each exact value with one FMA (fma(q, d, m): exact products again).
// tests/unit/core/test_quant.cpp states and checks the error bound.
//
// Block layouts (bytes; f16 = IEEE half, little-endian), as in ggml-common.h:
//   Q8_0  34 B / 32: d f16 | qs[32] i8                              x = d*q
//   Q4_0  18 B / 32: d f16 | qs[16]   (lo nibbles: x0..15, hi: 16..31)  x = d*(q-8)
//   Q4_1  20 B / 32: d f16 | m f16 | qs[16]                        x = d*q + m
//   Q5_0  22 B / 32: d f16 | qh[4] | qs[16]; q = nibble | bit j of qh (as 16) for x_j,
//         lo nibbles x0..15 with qh bits 0..15, hi nibbles x16..31 with bits 16..31; x = d*(q-16)
//   Q5_1  24 B / 32: d f16 | m f16 | qh[4] | qs[16]; q as Q5_0       x = d*q + m
//   Q4_K 144 B / 256: d f16 | dmin f16 | scales[12] (8 x 6-bit sc, 8 x 6-bit m) | qs[128]
//         4 chunks of 64: qs[32] lo nibbles -> sub-block 2j, hi nibbles -> 2j+1;
//         x = (d*sc_k)*q - (dmin*m_k)
//   Q5_K 176 B / 256: d f16 | dmin f16 | scales[12] (as Q4_K) | qh[32] | qs[128]; Q4_K's layout,
//         element l of sub-block k adding 16 to its nibble where bit k of qh[l] is set
//   Q6_K 210 B / 256: ql[128] | qh[64] | scales[16] i8 | d f16
//         2 halves of 128, each from ql[64], qh[32], scales[8]; for l in 0..31:
//         x[l+32g] = (d*sc[2g + l/16]) * (q - 32), q = 4 low bits from ql, 2 high bits from qh.
//   Q2_K  84 B / 256: scales[16] | qs[64] | d f16 | dmin f16; 16 sub-blocks of 16 with a 4-bit
//         scale and min; x = (d*sc)*q - (dmin*m), q 2 bits (core/kquant_layout.h)
//   Q3_K 110 B / 256: hmask[32] | qs[64] | scales[12] | d f16; 6-bit scales stored + 32;
//         x = (d*(sc - 32)) * q, q = 2 bits from qs, minus 4 unless its hmask bit is set
// Q2_K's and Q3_K's products are exact too (4- or 6-bit scales, 2- or 3-bit q).
//   IQ4_NL 18 B / 32: d f16 | qs[16] (Q4_0's order)               x = d*table[q]
//   IQ4_XS 136 B / 256: d f16 | scales_h u16 | scales_l[4] | qs[128]; 8 groups of 32 with a 6-bit
//         scale (stored + 32), nibbles as IQ4_NL's             x = (d*(sc - 32)) * table[q]
// table = ggml's kvalues_iq4nl (|value| <= 127: 7 bits), so d*table[q] needs 18 bits and
// (d*(sc - 32))*table[q] at most 11 + 5 + 7 = 23: exact as well.
#include "core/quant.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/kquant_layout.h"

#include "core/cpu_features.h"
#include "core/quant_kernels.h"

namespace medtune {

namespace {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

constexpr int64_t kQK = 32;    // legacy block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
constexpr int64_t kQKK = 256;  // k-quant super-block (Q4_K, Q5_K, Q6_K)
constexpr int64_t kQ8_0Bytes = 34;
constexpr int64_t kQ4_0Bytes = 18;
constexpr int64_t kQ4_1Bytes = 20;
constexpr int64_t kQ5_0Bytes = 22;
constexpr int64_t kQ5_1Bytes = 24;
constexpr int64_t kQ4_KBytes = 144;
constexpr int64_t kQ5_KBytes = 176;
constexpr int64_t kQ6_KBytes = 210;

using kquant::iq4xs_scale;
using kquant::kIq4nlBytes;
using kquant::kIq4nlValues;
using kquant::kIq4xsBytes;
using kquant::kQ2KBytes;
using kquant::kQ3KBytes;
using kquant::q3k_scale;
using kquant::q4k_scale_min;
using kquant::q6k_value;

// Per-sub-block factors of one Q4_K super-block (d, dmin: its two f16 scales): x = ds[k]*q - dm[k].
inline void q4k_factors(const uint8_t* blk, float d, float dmin, float ds[8], float dm[8]) {
  for (int k = 0; k < 8; ++k) {
    uint8_t sc, m;
    q4k_scale_min(k, blk + 4, &sc, &m);
    ds[k] = d * static_cast<float>(sc);
    dm[k] = dmin * static_cast<float>(m);
  }
}

// The AVX2 kernels run when this CPU has AVX2, FMA and F16C and MEDTUNE_ISA allows them.
bool use_avx2() {
  static const bool yes = active_isa() >= Isa::kAvx2;
  return yes;
}

[[noreturn]] void unsupported(const char* fn, DType t) {
  throw Internal(std::string(fn) + ": unsupported dtype " + std::string(dtype_name(t)));
}

void check_n(const char* fn, DType t, int64_t n) {
  if (n < 0 || n % dtype_block_elems(t) != 0) {
    throw Internal(std::string(fn) + ": n = " + std::to_string(n) + " is not a multiple of the " +
                   std::string(dtype_name(t)) + " block size");
  }
}

}  // namespace

// ======================================================================= scalar reference path

namespace quant_detail {

void dequantize_row_scalar(DType t, const void* src, float* y, int64_t n) {
  check_n("dequantize_row", t, n);
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(y, p, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = load_f16(p + 2 * i);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        y[i] = bf16_to_f32(h);
      }
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ8_0Bytes, y += kQK) {
        const float d = load_f16(p);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      }
      return;
    case DType::Q4_0:
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ4_0Bytes, y += kQK) {
        const float d = load_f16(p);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = static_cast<float>((p[2 + j] & 0xF) - 8) * d;
          y[j + kQK / 2] = static_cast<float>((p[2 + j] >> 4) - 8) * d;
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ4_1Bytes, y += kQK) {
        const float d = load_f16(p);
        const float m = load_f16(p + 2);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = static_cast<float>(p[4 + j] & 0xF) * d + m;
          y[j + kQK / 2] = static_cast<float>(p[4 + j] >> 4) * d + m;
        }
      }
      return;
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool q5_1 = t == DType::Q5_1;
      const int64_t bytes = q5_1 ? kQ5_1Bytes : kQ5_0Bytes;
      for (int64_t b = 0; b < n / kQK; ++b, p += bytes, y += kQK) {
        const float d = load_f16(p);
        const float m = q5_1 ? load_f16(p + 2) : 0.0f;
        const uint8_t* qh_bytes = p + (q5_1 ? 4 : 2);
        const uint8_t* qs = qh_bytes + 4;
        uint32_t qh;
        std::memcpy(&qh, qh_bytes, 4);
        for (int j = 0; j < kQK / 2; ++j) {
          const int q0 = (qs[j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10);
          const int q1 = (qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
          if (q5_1) {
            y[j] = static_cast<float>(q0) * d + m;
            y[j + kQK / 2] = static_cast<float>(q1) * d + m;
          } else {
            y[j] = static_cast<float>(q0 - 16) * d;
            y[j + kQK / 2] = static_cast<float>(q1 - 16) * d;
          }
        }
      }
      return;
    }
    case DType::Q5_K:
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ5_KBytes) {
        float ds[8], dm[8];
        q4k_factors(p, load_f16(p), load_f16(p + 2), ds, dm);  // the same 12 scale bytes
        const uint8_t* qh = p + 16;
        const uint8_t* q = p + 48;
        for (int j = 0; j < 4; ++j, q += 32) {
          for (int l = 0; l < 32; ++l) {
            const int hi = (qh[l] >> (2 * j)) & 1;
            *y++ = ds[2 * j] * static_cast<float>((q[l] & 0xF) + 16 * hi) - dm[2 * j];
          }
          for (int l = 0; l < 32; ++l) {
            const int hi = (qh[l] >> (2 * j + 1)) & 1;
            *y++ = ds[2 * j + 1] * static_cast<float>((q[l] >> 4) + 16 * hi) - dm[2 * j + 1];
          }
        }
      }
      return;
    case DType::Q4_K:
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ4_KBytes) {
        float ds[8], dm[8];
        q4k_factors(p, load_f16(p), load_f16(p + 2), ds, dm);
        const uint8_t* q = p + 16;
        for (int j = 0; j < 4; ++j, q += 32) {
          for (int l = 0; l < 32; ++l)
            *y++ = ds[2 * j] * static_cast<float>(q[l] & 0xF) - dm[2 * j];
          for (int l = 0; l < 32; ++l)
            *y++ = ds[2 * j + 1] * static_cast<float>(q[l] >> 4) - dm[2 * j + 1];
        }
      }
      return;
    case DType::Q2_K:  // ggml's dequantize_row_q2_K
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ2KBytes) {
        const uint8_t* sc = p;
        const float d = load_f16(p + 80), dmin = load_f16(p + 82);
        const uint8_t* q = p + 16;
        int is = 0;
        for (int h = 0; h < 2; ++h, q += 32) {
          for (int j = 0; j < 4; ++j) {
            for (int half = 0; half < 2; ++half, ++is) {
              const float dl = d * static_cast<float>(sc[is] & 0xF);
              const float ml = dmin * static_cast<float>(sc[is] >> 4);
              for (int l = 16 * half; l < 16 * half + 16; ++l)
                *y++ = dl * static_cast<float>((q[l] >> (2 * j)) & 3) - ml;
            }
          }
        }
      }
      return;
    case DType::Q3_K:  // ggml's dequantize_row_q3_K
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ3KBytes) {
        const uint8_t* hm = p;
        const uint8_t* q = p + 32;
        const float d = load_f16(p + 108);
        int is = 0;
        for (int h = 0; h < 2; ++h, q += 32) {
          for (int j = 0; j < 4; ++j) {
            const int bit = 4 * h + j;  // of hmask[l]
            for (int half = 0; half < 2; ++half, ++is) {
              const float dl = d * static_cast<float>(q3k_scale(is, p + 96) - 32);
              for (int l = 16 * half; l < 16 * half + 16; ++l) {
                const int v = ((q[l] >> (2 * j)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
                *y++ = dl * static_cast<float>(v);
              }
            }
          }
        }
      }
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ6_KBytes) {
        const float d = load_f16(p + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        for (int h = 0; h < 2; ++h, y += 128) {
          const uint8_t* ql = p + 64 * h;
          const uint8_t* qh = p + 128 + 32 * h;
          for (int g = 0; g < 4; ++g) {
            for (int l = 0; l < 32; ++l) {
              const float ds = d * static_cast<float>(sc[8 * h + 2 * g + l / 16]);
              y[32 * g + l] = ds * static_cast<float>(q6k_value(ql, qh, g, l) - 32);
            }
          }
        }
      }
      return;
    case DType::IQ4_NL:  // ggml's dequantize_row_iq4_nl
      for (int64_t b = 0; b < n / kQK; ++b, p += kIq4nlBytes, y += kQK) {
        const float d = load_f16(p);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = d * static_cast<float>(kIq4nlValues[p[2 + j] & 0xF]);
          y[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[p[2 + j] >> 4]);
        }
      }
      return;
    case DType::IQ4_XS:  // ggml's dequantize_row_iq4_xs
      for (int64_t b = 0; b < n / kQKK; ++b, p += kIq4xsBytes) {
        const float d = load_f16(p);
        const uint8_t* qs = p + kquant::kIq4xsQsOffset;
        for (int g = 0; g < 8; ++g, y += kQK, qs += kQK / 2) {
          const float dl = d * static_cast<float>(iq4xs_scale(g, p) - 32);
          for (int j = 0; j < kQK / 2; ++j) {
            y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
            y[j + kQK / 2] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
          }
        }
      }
      return;
    default: unsupported("dequantize_row", t);
  }
}

// One fp32 multiply-add per element, in element order: dequantize (exactly as above) and
// accumulate. Slow, obviously right, and the reference the fast path is tested against.
namespace {
// dot_row_scalar and dot_row_bf16_scalar: one block (or 256 plain elements) dequantized at a
// time, each value rounded through bf16 where `bf16`, products added in element order.
float dot_row_scalar_impl(DType t, const void* src, const float* x, int64_t n, bool bf16) {
  check_n(bf16 ? "dot_row_bf16" : "dot_row", t, n);
  float acc = 0.0f;
  float tmp[kQKK];  // one block, not a row
  const int64_t be = dtype_block_elems(t);
  const int64_t bb = dtype_block_bytes(t);
  const int64_t step = be == 1 ? kQKK : be;  // plain types: chunks of 256 elements
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; i += step) {
    const int64_t m = n - i < step ? n - i : step;
    dequantize_row_scalar(t, p + i / be * bb, tmp, m);
    if (bf16)
      for (int64_t j = 0; j < m; ++j) tmp[j] = round_through_bf16(tmp[j]);
    for (int64_t j = 0; j < m; ++j) acc += tmp[j] * x[i + j];
  }
  return acc;
}
}  // namespace

float dot_row_scalar(DType t, const void* src, const float* x, int64_t n) {
  return dot_row_scalar_impl(t, src, x, n, false);
}
float dot_row_bf16_scalar(DType t, const void* src, const float* x, int64_t n) {
  return dot_row_scalar_impl(t, src, x, n, true);
}

bool has_simd() {
  return use_avx2();
}

float load_f16_scalar(const uint8_t* p) {
  return load_f16(p);
}
float round_bf16_scalar(float f) {
  return round_through_bf16(f);
}
float load_bf16_scalar(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}
void q4k_block_factors(const uint8_t* blk, float d, float dmin, float ds[8], float dm[8]) {
  q4k_factors(blk, d, dmin, ds, dm);
}

}  // namespace quant_detail

// ======================================================================= public entry points

namespace {
bool avx2_dtype(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q2_K: case DType::Q3_K:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::IQ4_NL:
    case DType::IQ4_XS: return true;
    default: return false;
  }
}
}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  if (!use_avx2() || !avx2_dtype(t)) return quant_detail::dequantize_row_scalar(t, src, dst, n);
  check_n("dequantize_row", t, n);
  quant_detail::dequantize_row_avx2(t, static_cast<const uint8_t*>(src), dst, n);
}

float dot_row(DType t, const void* src, const float* x, int64_t n) {
  if (!use_avx2() || !avx2_dtype(t)) return quant_detail::dot_row_scalar(t, src, x, n);
  check_n("dot_row", t, n);
  return quant_detail::dot_row_avx2(t, static_cast<const uint8_t*>(src), x, n);
}

float dot_row_bf16(DType t, const void* src, const float* x, int64_t n) {
  if (!use_avx2() || !avx2_dtype(t)) return quant_detail::dot_row_bf16_scalar(t, src, x, n);
  check_n("dot_row_bf16", t, n);
  return quant_detail::dot_row_bf16_avx2(t, static_cast<const uint8_t*>(src), x, n);
}

bool dot_lanes8(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const float* const* x, int ntok,
                int64_t n, float* lanes) {
  if (!use_avx2() || ntok < 1 || ntok > 4) return false;
  check_n("dot_lanes8", t, n);
  return quant_detail::dot_lanes8_avx2(t, w, row_bytes, nrows, x, ntok, n, lanes);
}

}  // namespace medtune
