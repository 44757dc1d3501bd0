// How ggml's k-quant super-blocks (256 elements) store their values: shared by the dequantizer
// (core/quant.cpp) and the int8 dot kernels (core/quant_int8*.cpp).
//   Q4_K 144 B: d f16 | dmin f16 | scales[12] (8 x 6-bit sc, 8 x 6-bit m) | qs[128]; sub-block k
//               (32 elements) = ds[k]*q - dm[k], q in 0..15 from the low (k even) or high (k odd)
//               nibbles of qs[32*(k/2) .. +32).
//   Q6_K 210 B: ql[128] | qh[64] | scales[16] i8 | d f16; two halves of 128, each four groups of 32
//               (q6k_value), each group two sub-blocks of 16 with their own scale:
//               element l of group g of half h = d * scales[8h + 2g + l/16] * (q - 32).
//   Q2_K  84 B: scales[16] (low nibble sc, high nibble m) | qs[64] | d f16 | dmin f16; element
//               e = 128h + 32j + l (h < 2, j < 4, l < 32): q = (qs[32h + l] >> 2j) & 3, sub-block
//               s = e / 16: x = (d * sc_s) * q - dmin * m_s.
//   Q3_K 110 B: hmask[32] | qs[64] | scales[12] (16 x 6 bits, q3k_scale) | d f16; element e as
//               Q2_K's: q = ((qs[32h + l] >> 2j) & 3) - 4, plus 4 where bit e / 32 of hmask[l]
//               is set (-4..3): x = (d * (scale_s - 32)) * q.
// And llama.cpp's non-linear 4-bit types, whose nibbles q index kIq4nlValues:
//   IQ4_NL 18 B / 32: d f16 | qs[16]; element l < 16 the low nibble of qs[l], l >= 16 the high
//               nibble of qs[l - 16] (Q4_0's order): x = d * kIq4nlValues[q].
//   IQ4_XS 136 B / 256: d f16 | scales_h u16 | scales_l[4] | qs[128]; group g (0..7) of 32 has
//               the 6-bit scale iq4xs_scale(g) (stored + 32) and qs[16g .. 16g + 16) in IQ4_NL's
//               order: x = (d * (scale_g - 32)) * kIq4nlValues[q].
// Internal linkage on purpose: the per-ISA kernel files include this with their own -m flags,
// and an inline function shared between them could be resolved to a copy using instructions the
// CPU lacks.
#pragma once

#include <cstdint>

namespace medtune::kquant {
namespace {

constexpr int64_t kSuperBlock = 256;
constexpr int64_t kQ4KBytes = 144;
constexpr int64_t kQ6KBytes = 210;
constexpr int64_t kQ4KQsOffset = 16;    // after d, dmin and the 12 scale bytes
constexpr int64_t kQ6KScaleOffset = 192;
constexpr int64_t kQ6KDOffset = 208;
constexpr int64_t kQ2KBytes = 84;
constexpr int64_t kQ2KDOffset = 80;  // then dmin at 82
constexpr int64_t kQ3KBytes = 110;
constexpr int64_t kQ3KQsOffset = 32;
constexpr int64_t kQ3KScaleOffset = 96;
constexpr int64_t kQ3KDOffset = 108;
constexpr int64_t kIq4nlBytes = 18;
constexpr int64_t kIq4xsBytes = 136;
constexpr int64_t kIq4xsQsOffset = 8;  // after d, scales_h and scales_l

// ggml's kvalues_iq4nl.
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block (ggml's get_scale_min_k4):
// bytes 0-3 hold sc0-3 (low 6 bits) and the top 2 bits of sc4-7; bytes 4-7 likewise for m;
// bytes 8-11 hold the low 4 bits of sc4-7 (low nibble) and m4-7 (high nibble). q: the 12 bytes.
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 6-bit scale (0..63, stored with +32) of sub-block s (0..15) of a Q3_K super-block (ggml's
// kmask unpacking): bytes 0-7 hold the low 4 bits (sub-block s < 8 in byte s's low nibble, s >= 8
// in byte s - 8's high one), bytes 8-11 the top 2 (sub-block s at bit 2 * (s / 4) of byte
// 8 + s % 4). q: the 12 bytes.
inline int q3k_scale(int s, const uint8_t* q) {
  const int lo = s < 8 ? q[s] & 0xF : q[s - 8] >> 4;
  const int hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
  return lo | hi << 4;
}

// The 6-bit scale (0..63, stored with +32) of group g (0..7) of an IQ4_XS super-block at blk:
// its low 4 bits are nibble g % 2 of scales_l[g / 2], its top 2 bits 2g, 2g + 1 of scales_h.
inline int iq4xs_scale(int g, const uint8_t* blk) {
  const int lo = (blk[4 + g / 2] >> (4 * (g % 2))) & 0xF;
  const int scales_h = blk[2] | blk[3] << 8;
  return lo | ((scales_h >> (2 * g)) & 3) << 4;
}

// The 6-bit value (0..63) of element l + 32*g of a Q6_K half (ql: 64 bytes, qh: 32 bytes).
inline int q6k_value(const uint8_t* ql, const uint8_t* qh, int g, int l) {
  const int lo = (g & 1) ? ql[l + 32] : ql[l];
  const int nib = (g < 2) ? (lo & 0xF) : (lo >> 4);
  return nib | (((qh[l] >> (2 * g)) & 3) << 4);
}

}  // namespace
}  // namespace medtune::kquant
