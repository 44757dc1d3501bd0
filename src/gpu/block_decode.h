// Element i of a run of ggml blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS) or medtune NF4 row blocks, decoded on its own: the per-element form of
// medtune::dequantize_row that GPU kernels need (one thread per output element, gpu/decode.h).
// Plain C++ with no GPU header, so the same functions compile for the host too:
// tests/unit/core/test_block_decode.cpp runs them on the CPU against dequantize_row over every
// element, which checks the indexing of the kernels on machines without a GPU.
//
// The two conversions a device and the host do differently are parameters: to_f32(u16 half bits)
// and u32_to_f32(bits). Bit-exact with the CPU for the reason core/quant.cpp gives: every product
// is exact in fp32 (an f16 scale has 11 significant bits, the integer factors at most 8) and at
// most one rounding follows, so order and FMA contraction cannot change a bit; Q6_K's (d·sc)·q
// rounds once and has no add.
//
// Layouts (bytes, little-endian), as core/quant.cpp and ggml-common.h:
//   Q8_0  34 B / 32: d f16 | qs[32] i8                                  x = q·d
//   Q4_0  18 B / 32: d f16 | qs[16] (lo nibbles: x0..15, hi: x16..31)    x = (q − 8)·d
//   Q4_1  20 B / 32: d f16 | m f16 | qs[16], nibbles as Q4_0              x = q·d + m
//   Q5_0  22 B / 32: d f16 | qh[4] | qs[16], nibbles as Q4_0 plus 16·(bit j of qh) for x_j
//                                                                       x = (q − 16)·d
//   Q5_1  24 B / 32: d f16 | m f16 | qh[4] | qs[16], q as Q5_0           x = q·d + m
//   Q4_K 144 B / 256: d f16 | dmin f16 | scales[12] | qs[128]; 4 chunks of 64 elements, each from
//        32 bytes of qs: lo nibbles are sub-block 2c, hi nibbles 2c + 1.  x = (d·sc)·q − dmin·m
//   Q5_K 176 B / 256: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]: Q4_K plus 16 where bit s
//        of qh[l] is set, for element l of sub-block s.                   x = (d·sc)·q − dmin·m
//   Q6_K 210 B / 256: ql[128] | qh[64] | scales[16] i8 | d f16; 2 halves of 128, each from ql[64],
//        qh[32], scales[8]; element 32g + l of a half: q = 4 bits of ql, 2 of qh.  x = (d·sc)·(q − 32)
//   Q2_K  84 B / 256: scales[16] | qs[64] | d f16 | dmin f16; element 128h + 32j + l: q = 2 bits of
//        qs[32h + l] at 2j, sub-block s = k / 16 with sc, m the nibbles of scales[s]. x = (d·sc)·q − dmin·m
//   Q3_K 110 B / 256: hmask[32] | qs[64] | scales[12] | d f16; q as Q2_K's minus 4 unless bit k / 32
//        of hmask[l] is set; 6-bit scales (core/kquant_layout.h q3k_scale) stored + 32.  x = (d·(sc − 32))·q
//   IQ4_NL 18 B / 32: d f16 | qs[16], nibbles as Q4_0                  x = table[q]·d
//   IQ4_XS 136 B / 256: d f16 | scales_h u16 | scales_l[4] | qs[128]; group g of 32: 6-bit scale
//        (low 4 bits: nibble g % 2 of scales_l[g / 2]; top 2: bits 2g of scales_h) stored + 32,
//        nibbles qs[16g ..] as IQ4_NL's.                           x = (d·(sc − 32))·table[q]
//        table: ggml's kvalues_iq4nl (|value| <= 127), so both products are exact.
//   NF4   36 B / 64: f32 absmax | 32 bytes, element 2k in the HIGH nibble of byte k.  x = code[q]·absmax
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace medtune::block_decode {

inline constexpr int64_t kQK = 32;    // ggml's legacy block: Q8_0, Q4_0, Q4_1
inline constexpr int64_t kQKK = 256;  // k-quant super-block: Q2_K to Q6_K
inline constexpr int64_t kNf4Block = 64;
inline constexpr int64_t kQ8_0Bytes = 34, kQ4_0Bytes = 18, kQ4_1Bytes = 20;
inline constexpr int64_t kQ5_0Bytes = 22, kQ5_1Bytes = 24;
inline constexpr int64_t kQ4_KBytes = 144, kQ5_KBytes = 176, kQ6_KBytes = 210, kNf4Bytes = 36;
inline constexpr int64_t kQ2_KBytes = 84, kQ3_KBytes = 110;
inline constexpr int64_t kIq4_NLBytes = 18, kIq4_XSBytes = 136;

// ggml's kvalues_iq4nl (core/kquant_layout.h kIq4nlValues, which test_block_decode compares),
// packed 8 to a uint64 so that device code reads no table from memory: value q is byte q % 8 of
// kIq4nlLow (q < 8) or kIq4nlHigh, as int8.
inline constexpr uint64_t kIq4nlLow = 0xf6eaddcfbfad9881ULL, kIq4nlHigh = 0x7159453526190d01ULL;
MEDTUNE_HOST_DEVICE inline int iq4nl_value(int q) {
  const uint64_t w = q < 8 ? kIq4nlLow : kIq4nlHigh;
  return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * (q % 8))));
}

// Element j (0..31) of 16 bytes of nibbles in ggml's legacy order (Q4_0, Q4_1, Q5_*, IQ4_NL, and
// each IQ4_XS group): j < 16 the low nibble of qs[j], else the high nibble of qs[j - 16].
MEDTUNE_HOST_DEVICE inline int legacy_nibble(const uint8_t* qs, int j) {
  return j < kQK / 2 ? (qs[j] & 0xF) : (qs[j - kQK / 2] >> 4);
}

MEDTUNE_HOST_DEVICE inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
MEDTUNE_HOST_DEVICE inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q8_0(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kQ8_0Bytes;
  return static_cast<float>(static_cast<int8_t>(blk[2 + i % kQK])) * to_f32(load_u16(blk));
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q4_0(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kQ4_0Bytes;
  const int q = legacy_nibble(blk + 2, static_cast<int>(i % kQK));
  return static_cast<float>(q - 8) * to_f32(load_u16(blk));
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q4_1(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kQ4_1Bytes;
  const int q = legacy_nibble(blk + 4, static_cast<int>(i % kQK));
  return static_cast<float>(q) * to_f32(load_u16(blk)) + to_f32(load_u16(blk + 2));
}

// The 5-bit quant of element j of a Q5_0/Q5_1 block (qh: its 4 bytes, qs: its 16).
MEDTUNE_HOST_DEVICE inline int q5_quant(const uint8_t* qh, const uint8_t* qs, int j) {
  return legacy_nibble(qs, j) | static_cast<int>(((load_u32(qh) >> j) & 1u) << 4);
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q5_0(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kQ5_0Bytes;
  return static_cast<float>(q5_quant(blk + 2, blk + 6, static_cast<int>(i % kQK)) - 16) *
         to_f32(load_u16(blk));
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q5_1(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kQ5_1Bytes;
  return static_cast<float>(q5_quant(blk + 4, blk + 8, static_cast<int>(i % kQK))) *
             to_f32(load_u16(blk)) +
         to_f32(load_u16(blk + 2));
}

// Q4_K and Q5_K (kQsOffset 16 and 48; Q5_K's qh[32] at 16): element k of a super-block at blk.
MEDTUNE_NO_EXEC_CHECK
template <bool kFifthBit, typename F16>
MEDTUNE_HOST_DEVICE inline float k_quant_4_5(const uint8_t* blk, int k, F16 to_f32) {
  const int chunk = k / 64, within = k % 64;
  const int sub = 2 * chunk + within / 32;  // sub-block 0..7
  const uint8_t byte = blk[(kFifthBit ? 48 : 16) + 32 * chunk + within % 32];
  int q = within < 32 ? (byte & 0xF) : (byte >> 4);
  if constexpr (kFifthBit) q |= ((blk[16 + within % 32] >> sub) & 1) << 4;
  // ggml's get_scale_min_k4: bytes 0-3 of scales hold sc0-3 (low 6 bits) and the top 2 bits of
  // sc4-7; bytes 4-7 likewise for m; bytes 8-11 the low 4 bits of sc4-7 (lo) and m4-7 (hi).
  const uint8_t* s = blk + 4;
  int sc, m;
  if (sub < 4) {
    sc = s[sub] & 63;
    m = s[sub + 4] & 63;
  } else {
    sc = (s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4);
    m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
  const float ds = to_f32(load_u16(blk)) * static_cast<float>(sc);
  const float dm = to_f32(load_u16(blk + 2)) * static_cast<float>(m);
  return ds * static_cast<float>(q) - dm;
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q4_k(const uint8_t* src, int64_t i, F16 to_f32) {
  return k_quant_4_5<false>(src + (i / kQKK) * kQ4_KBytes, static_cast<int>(i % kQKK), to_f32);
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q5_k(const uint8_t* src, int64_t i, F16 to_f32) {
  return k_quant_4_5<true>(src + (i / kQKK) * kQ5_KBytes, static_cast<int>(i % kQKK), to_f32);
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q2_k(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQKK) * kQ2_KBytes;
  const int k = static_cast<int>(i % kQKK);
  const int h = k / 128, j = (k % 128) / 32, l = k % 32;
  const int q = (blk[16 + 32 * h + l] >> (2 * j)) & 3;
  const uint8_t sc = blk[k / 16];
  const float dl = to_f32(load_u16(blk + 80)) * static_cast<float>(sc & 0xF);
  const float ml = to_f32(load_u16(blk + 82)) * static_cast<float>(sc >> 4);
  return dl * static_cast<float>(q) - ml;
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q3_k(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQKK) * kQ3_KBytes;
  const int k = static_cast<int>(i % kQKK);
  const int h = k / 128, j = (k % 128) / 32, l = k % 32, s = k / 16;
  const int q = ((blk[32 + 32 * h + l] >> (2 * j)) & 3) - (((blk[l] >> (k / 32)) & 1) ? 0 : 4);
  // The 6-bit scale of sub-block s: 4 low bits from bytes 0-7 (s >= 8: the high nibbles), 2 high
  // bits from bytes 8-11 (ggml's kmask unpacking).
  const uint8_t* scales = blk + 96;
  const int lo = s < 8 ? (scales[s] & 0xF) : (scales[s - 8] >> 4);
  const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  const float dl = to_f32(load_u16(blk + 108)) * static_cast<float>((lo | hi << 4) - 32);
  return dl * static_cast<float>(q);
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float iq4_nl(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQK) * kIq4_NLBytes;
  const int q = legacy_nibble(blk + 2, static_cast<int>(i % kQK));
  return static_cast<float>(iq4nl_value(q)) * to_f32(load_u16(blk));
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float iq4_xs(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQKK) * kIq4_XSBytes;
  const int k = static_cast<int>(i % kQKK);
  const int g = k / kQK, l = k % kQK;
  const int q = legacy_nibble(blk + 8 + 16 * g, l);
  const int scale =
      ((blk[4 + g / 2] >> (4 * (g % 2))) & 0xF) | (((load_u16(blk + 2) >> (2 * g)) & 3) << 4);
  const float dl = to_f32(load_u16(blk)) * static_cast<float>(scale - 32);
  return dl * static_cast<float>(iq4nl_value(q));
}

MEDTUNE_NO_EXEC_CHECK
template <typename F16>
MEDTUNE_HOST_DEVICE inline float q6_k(const uint8_t* src, int64_t i, F16 to_f32) {
  const uint8_t* blk = src + (i / kQKK) * kQ6_KBytes;
  const int k = static_cast<int>(i % kQKK);
  const int half = k / 128, g = (k % 128) / 32, l = k % 32;
  const uint8_t* ql = blk + 64 * half;
  const uint8_t* qh = blk + 128 + 32 * half;
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * half);
  const int lo = (g & 1) ? ql[l + 32] : ql[l];
  const int q = ((g < 2) ? (lo & 0xF) : (lo >> 4)) | (((qh[l] >> (2 * g)) & 3) << 4);
  const float ds = to_f32(load_u16(blk + 208)) * static_cast<float>(sc[2 * g + l / 16]);
  return ds * static_cast<float>(q - 32);
}

// code: bitsandbytes' 16 NF4 values (nf4::kCode), passed in so that a kernel gets them by value.
MEDTUNE_NO_EXEC_CHECK
template <typename U32ToF32>
MEDTUNE_HOST_DEVICE inline float nf4(const uint8_t* src, int64_t i, const float* code, U32ToF32 u32_to_f32) {
  const uint8_t* blk = src + (i / kNf4Block) * kNf4Bytes;
  const int j = static_cast<int>(i % kNf4Block);
  const uint8_t byte = blk[4 + j / 2];
  const int q = (j % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
  return code[q] * u32_to_f32(load_u32(blk));
}

}  // namespace medtune::block_decode
