// The AVX2 + FMA + F16C kernels of core/quant.cpp (see there for the numerics), compiled with
// those flags whatever the build's baseline (cmake/isa_kernels.cmake) and called only when
// core/cpu_features.h says this CPU has them. Only intrinsics and quant_kernels.h's out-of-line
// helpers are used here: no inline library code that the linker could share with other files.
#include "core/kquant_layout.h"
#include "core/quant_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

namespace medtune {

namespace {

constexpr int64_t kQK = 32;    // legacy block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
constexpr int64_t kQKK = 256;  // k-quant super-block (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)
constexpr int64_t kQ8_0Bytes = 34;
constexpr int64_t kQ4_0Bytes = 18;
constexpr int64_t kQ4_1Bytes = 20;
constexpr int64_t kQ5_0Bytes = 22;
constexpr int64_t kQ5_1Bytes = 24;
constexpr int64_t kQ4_KBytes = 144;
constexpr int64_t kQ5_KBytes = 176;
constexpr int64_t kQ6_KBytes = 210;


inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// An f16 scale via F16C: exact like f16_to_f32 (which loops over subnormals), and branch-free.
inline float load_f16_fast(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// 8 signed bytes (the low 8 of v) -> 8 floats, exactly.
inline __m256 i8x8_to_ps(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
inline __m128i hi64(__m128i v) {
  return _mm_srli_si128(v, 8);
}

// Four groups of 8 elements of a 32-element block, as floats.
struct Block32 {
  __m256 v[4];
};

inline __m128i load64(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

inline Block32 q8_0_values(const uint8_t* p) {
  Block32 b;
  for (int k = 0; k < 4; ++k) b.v[k] = i8x8_to_ps(load64(p + 2 + 8 * k));  // vpmovsxbd from memory
  return b;
}

// 8 bytes -> 8 int32 lanes (vpmovzxbd straight from memory); the low nibbles of those lanes are
// 8 consecutive elements and the high nibbles the 8 elements 16 (Q4_0/Q4_1) or 32 (Q4_K) later.
inline __m256i bytes_to_lanes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(load64(p));
}
inline __m256 lo_nibbles(__m256i w) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(15)));
}
inline __m256 hi_nibbles(__m256i w) {
  return _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4));
}

// Q4_0 (qs at offset 2, minus 8) and Q4_1 (qs at offset 4, unsigned) quants of one block.
inline Block32 q4_values(const uint8_t* qs, bool minus8) {
  __m256i w0 = bytes_to_lanes(qs), w1 = bytes_to_lanes(qs + 8);
  Block32 b;
  if (minus8) {
    const __m256i m15 = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    b.v[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(w0, m15), eight));
    b.v[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(w1, m15), eight));
    b.v[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(w0, 4), eight));
    b.v[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(w1, 4), eight));
  } else {
    b.v[0] = lo_nibbles(w0);
    b.v[1] = lo_nibbles(w1);
    b.v[2] = hi_nibbles(w0);
    b.v[3] = hi_nibbles(w1);
  }
  return b;
}

// Lane l of group k: bit 8k + l, the 5th bit of element 8k + l in a Q5_0/Q5_1 block's qh.
alignas(32) constexpr uint32_t kQ5LaneBits[32] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
    1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

// Q5_0 (qh at offset 2, qs at 6, minus 16) and Q5_1 (qh at 4, qs at 8, unsigned) quants of one
// block: Q4's nibbles, element i adding 16 where bit i of qh is set.
inline Block32 q5_values(const uint8_t* qh_bytes, const uint8_t* qs, bool minus16) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i bits = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i w0 = bytes_to_lanes(qs), w1 = bytes_to_lanes(qs + 8);
  const __m256i m15 = _mm256_set1_epi32(15);
  const __m256i nib[4] = {_mm256_and_si256(w0, m15), _mm256_and_si256(w1, m15),
                          _mm256_srli_epi32(w0, 4), _mm256_srli_epi32(w1, 4)};
  Block32 b;
  for (int k = 0; k < 4; ++k) {
    const __m256i lane_bit =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kQ5LaneBits + 8 * k));
    const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(bits, lane_bit), lane_bit);
    __m256i q = _mm256_or_si256(nib[k], _mm256_and_si256(set, _mm256_set1_epi32(16)));
    if (minus16) q = _mm256_sub_epi32(q, _mm256_set1_epi32(16));
    b.v[k] = _mm256_cvtepi32_ps(q);
  }
  return b;
}

// Q5_K: chunk j (32 bytes of qs, the 32 bytes of qh) -> sub-block 2j (low nibbles, 5th bit = bit
// 2j of qh[l]) and 2j+1 (high nibbles, bit 2j+1).
inline void q5k_chunk(const uint8_t* qs, const uint8_t* qh, int j, Block32* lo, Block32* hi) {
  const __m256i one = _mm256_set1_epi32(1);
  for (int k = 0; k < 4; ++k) {
    const __m256i w = bytes_to_lanes(qs + 8 * k);
    const __m256i h = bytes_to_lanes(qh + 8 * k);
    const __m256i h_lo = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * j), one), 4);
    const __m256i h_hi =
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * j + 1), one), 4);
    lo->v[k] =
        _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi32(15)), h_lo));
    hi->v[k] = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(w, 4), h_hi));
  }
}

// Q4_K: one chunk of 32 bytes -> sub-block 2j (low nibbles) and 2j+1 (high nibbles).
inline void q4k_chunk(const uint8_t* qs, Block32* lo, Block32* hi) {
  for (int k = 0; k < 4; ++k) {
    const __m256i w = bytes_to_lanes(qs + 8 * k);
    lo->v[k] = lo_nibbles(w);
    hi->v[k] = hi_nibbles(w);
  }
}

// Q6_K: the four 32-value groups of one half (ql: 64 bytes, qh: 32 bytes) as signed bytes
// q - 32, group g holding elements 32g .. 32g+31 of the half.
inline void q6k_groups(const uint8_t* ql, const uint8_t* qh, __m256i g[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  const __m256i off = _mm256_set1_epi8(32);
  const __m256i l0 = load256(ql), l1 = load256(ql + 32), h = load256(qh);
  const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, m2), 4);
  const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4);
  const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4);
  const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4);
  g[0] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), h0), off);
  g[1] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), h1), off);
  g[2] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2), off);
  g[3] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3), off);
}

// The exact values of one block of a quantized type T, eight at a time: emit(i, v) receives
// elements [i, i + 8) of the block, i ascending. dequantize_row_avx2 stores them and dot_lanes8
// multiplies them in registers; both see the same values because both run this code.
template <DType T>
struct BlockOf;
template <> struct BlockOf<DType::Q8_0> { static constexpr int64_t elems = kQK, bytes = kQ8_0Bytes; };
template <> struct BlockOf<DType::Q4_0> { static constexpr int64_t elems = kQK, bytes = kQ4_0Bytes; };
template <> struct BlockOf<DType::Q4_1> { static constexpr int64_t elems = kQK, bytes = kQ4_1Bytes; };
template <> struct BlockOf<DType::Q4_K> { static constexpr int64_t elems = kQKK, bytes = kQ4_KBytes; };
template <> struct BlockOf<DType::Q6_K> { static constexpr int64_t elems = kQKK, bytes = kQ6_KBytes; };
template <> struct BlockOf<DType::Q5_0> { static constexpr int64_t elems = kQK, bytes = kQ5_0Bytes; };
template <> struct BlockOf<DType::Q5_1> { static constexpr int64_t elems = kQK, bytes = kQ5_1Bytes; };
template <> struct BlockOf<DType::Q5_K> { static constexpr int64_t elems = kQKK, bytes = kQ5_KBytes; };
template <> struct BlockOf<DType::Q2_K> { static constexpr int64_t elems = kQKK, bytes = kquant::kQ2KBytes; };
template <> struct BlockOf<DType::Q3_K> { static constexpr int64_t elems = kQKK, bytes = kquant::kQ3KBytes; };
template <> struct BlockOf<DType::IQ4_NL> { static constexpr int64_t elems = kQK, bytes = kquant::kIq4nlBytes; };
template <> struct BlockOf<DType::IQ4_XS> { static constexpr int64_t elems = kQKK, bytes = kquant::kIq4xsBytes; };

// IQ4_NL's and IQ4_XS's 16 bytes of nibbles -> their 32 table values (kquant::kIq4nlValues),
// elements 0..15 from the low nibbles, 16..31 from the high ones.
inline Block32 iq4_values(const uint8_t* qs) {
  const __m128i table =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kquant::kIq4nlValues));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, m4));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
  Block32 v;
  v.v[0] = i8x8_to_ps(lo);
  v.v[1] = i8x8_to_ps(hi64(lo));
  v.v[2] = i8x8_to_ps(hi);
  v.v[3] = i8x8_to_ps(hi64(hi));
  return v;
}

template <DType T, typename Emit>
inline void decode_block(const uint8_t* p, Emit&& emit) {
  if constexpr (T == DType::Q8_0) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const Block32 q = q8_0_values(p);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_mul_ps(q.v[k], d));
  } else if constexpr (T == DType::Q4_0) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const Block32 q = q4_values(p + 2, true);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_mul_ps(q.v[k], d));
  } else if constexpr (T == DType::Q4_1) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const __m256 m = _mm256_set1_ps(load_f16_fast(p + 2));
    const Block32 q = q4_values(p + 4, false);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_add_ps(_mm256_mul_ps(q.v[k], d), m));
  } else if constexpr (T == DType::Q5_0) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const Block32 q = q5_values(p + 2, p + 6, true);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_mul_ps(q.v[k], d));
  } else if constexpr (T == DType::IQ4_NL) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const Block32 q = iq4_values(p + 2);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_mul_ps(q.v[k], d));
  } else if constexpr (T == DType::IQ4_XS) {
    const float d = load_f16_fast(p);
    for (int g = 0; g < 8; ++g) {
      const __m256 dl = _mm256_set1_ps(d * static_cast<float>(kquant::iq4xs_scale(g, p) - 32));
      const Block32 q = iq4_values(p + kquant::kIq4xsQsOffset + 16 * g);
      for (int k = 0; k < 4; ++k) emit(32 * g + 8 * k, _mm256_mul_ps(q.v[k], dl));
    }
  } else if constexpr (T == DType::Q5_1) {
    const __m256 d = _mm256_set1_ps(load_f16_fast(p));
    const __m256 m = _mm256_set1_ps(load_f16_fast(p + 2));
    const Block32 q = q5_values(p + 4, p + 8, false);
    for (int k = 0; k < 4; ++k) emit(8 * k, _mm256_add_ps(_mm256_mul_ps(q.v[k], d), m));
  } else if constexpr (T == DType::Q5_K) {
    float ds[8], dm[8];
    quant_detail::q4k_block_factors(p, load_f16_fast(p), load_f16_fast(p + 2), ds, dm);
    const uint8_t* qs = p + 48;
    for (int j = 0; j < 4; ++j, qs += 32) {
      Block32 q[2];
      q5k_chunk(qs, p + 16, j, &q[0], &q[1]);
      for (int s = 0; s < 2; ++s) {
        const __m256 d = _mm256_set1_ps(ds[2 * j + s]);
        const __m256 m = _mm256_set1_ps(dm[2 * j + s]);
        for (int k = 0; k < 4; ++k)
          emit(64 * j + 32 * s + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d, q[s].v[k]), m));
      }
    }
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Element 128h + 32j + l: 2 bits of qs[32h + l] at 2j; sub-block s = 8h + 2j + l / 16 (each
    // lane group of 8 lies in one). Q3_K: minus 4 unless bit 4h + j of hmask[l] is set.
    constexpr bool kQ2 = T == DType::Q2_K;
    float dl[16], ml[16];
    if constexpr (kQ2) {
      const float d = load_f16_fast(p + 80), dmin = load_f16_fast(p + 82);
      for (int s = 0; s < 16; ++s) {
        dl[s] = d * static_cast<float>(p[s] & 0xF);
        ml[s] = dmin * static_cast<float>(p[s] >> 4);
      }
    } else {
      const float d = load_f16_fast(p + kquant::kQ3KDOffset);
      for (int s = 0; s < 16; ++s)
        dl[s] = d * static_cast<float>(kquant::q3k_scale(s, p + kquant::kQ3KScaleOffset) - 32);
    }
    const uint8_t* qs = p + (kQ2 ? 16 : kquant::kQ3KQsOffset);
    const __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
    __m256i hm[4];  // Q3_K: hmask[8k .. 8k + 8) as lanes, the same bytes for both halves
    if constexpr (!kQ2)
      for (int k = 0; k < 4; ++k) hm[k] = bytes_to_lanes(p + 8 * k);
    for (int h = 0; h < 2; ++h) {
      __m256i w[4];
      for (int k = 0; k < 4; ++k) w[k] = bytes_to_lanes(qs + 32 * h + 8 * k);
      // i ascending, as the contract above says (dot_lanes8 sums in that order): j before k.
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 4; ++k) {
          __m256i q = _mm256_and_si256(_mm256_srli_epi32(w[k], 2 * j), three);
          if constexpr (!kQ2) {  // q - 4 + 4 * bit
            const __m256i bit = _mm256_and_si256(_mm256_srli_epi32(hm[k], 4 * h + j), one);
            q = _mm256_sub_epi32(q, _mm256_slli_epi32(_mm256_xor_si256(bit, one), 2));
          }
          const int s = 8 * h + 2 * j + k / 2;
          const __m256 v = _mm256_mul_ps(_mm256_set1_ps(dl[s]), _mm256_cvtepi32_ps(q));
          emit(128 * h + 32 * j + 8 * k, kQ2 ? _mm256_sub_ps(v, _mm256_set1_ps(ml[s])) : v);
        }
    }
  } else if constexpr (T == DType::Q4_K) {
    float ds[8], dm[8];
    quant_detail::q4k_block_factors(p, load_f16_fast(p), load_f16_fast(p + 2), ds, dm);
    const uint8_t* qs = p + 16;
    for (int j = 0; j < 4; ++j, qs += 32) {
      Block32 q[2];
      q4k_chunk(qs, &q[0], &q[1]);
      for (int s = 0; s < 2; ++s) {
        const __m256 d = _mm256_set1_ps(ds[2 * j + s]);
        const __m256 m = _mm256_set1_ps(dm[2 * j + s]);
        for (int k = 0; k < 4; ++k) emit(64 * j + 32 * s + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d, q[s].v[k]), m));
      }
    }
  } else {
    static_assert(T == DType::Q6_K);
    const float d = load_f16_fast(p + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i g[4];
      q6k_groups(p + 64 * h, p + 128 + 32 * h, g);
      for (int gi = 0; gi < 4; ++gi) {
        const __m128i a = _mm256_castsi256_si128(g[gi]);
        const __m128i c = _mm256_extracti128_si256(g[gi], 1);
        const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * gi]));
        const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * gi + 1]));
        const int o = 128 * h + 32 * gi;
        emit(o, _mm256_mul_ps(d0, i8x8_to_ps(a)));
        emit(o + 8, _mm256_mul_ps(d0, i8x8_to_ps(hi64(a))));
        emit(o + 16, _mm256_mul_ps(d1, i8x8_to_ps(c)));
        emit(o + 24, _mm256_mul_ps(d1, i8x8_to_ps(hi64(c))));
      }
    }
  }
}

template <DType T>
void dequantize_blocks(const uint8_t* p, float* y, int64_t n) {
  for (int64_t b = 0; b < n / BlockOf<T>::elems; ++b, p += BlockOf<T>::bytes, y += BlockOf<T>::elems)
    decode_block<T>(p, [y](int i, __m256 v) { _mm256_storeu_ps(y + i, v); });
}

// Prefetch distance in the row stream: the tiles read 4 rows at once, which on a matrix larger
// than the cache the hardware prefetcher does not follow (docs/decisions/batch-invariant-serving.md,
// "Cost"). A prefetch past the end of the weights is harmless (it never faults).
constexpr int64_t kPrefetchBytes = 8192;

// Asks for the cache lines of [p, p + bytes) kPrefetchBytes ahead. The row kernels below, which
// decode calls one row after another, waited on their loads without it: SmolLM2's fp32 decode
// went from 61 to 108 tokens/s on an Intel Xeon (BENCHMARKS.md, session 40); the hardware
// prefetcher does not run far enough ahead of rows of a few hundred bytes.
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + o + kPrefetchBytes), _MM_HINT_T0);
}

// lanes[(j * M + t) * 8 + l] for rows j < nw of the tile (NW rows from `w`, stride row_bytes;
// rows past nw repeat the last and are not stored) and tokens t < M: lane l of
// acc = fma(value[k], x_t[k], acc) over k = l, l + 8, ... ascending, the 8-lane order of
// ops/cpu/linear_invariant.cpp. NW x M accumulators = NW x M independent FMA chains.

template <DType T, int NW, int M>
void lanes_tile(const uint8_t* w, int64_t row_bytes, int nw, const float* const* x, int64_t n, float* lanes) {
  constexpr int64_t E = BlockOf<T>::elems, B = BlockOf<T>::bytes;
  __m256 acc[NW][M];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  const uint8_t* wr[NW];
  for (int j = 0; j < NW; ++j) wr[j] = w + (j < nw ? j : nw - 1) * row_bytes;
  // The pragmas unroll j and t: with a variable index the accumulators would live in memory and
  // every FMA of a chain would wait on a store and a load.
  for (int64_t b = 0; b < n / E; ++b) {
#pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(wr[j] + b * B + kPrefetchBytes), _MM_HINT_T0);
      decode_block<T>(wr[j] + b * B, [&acc, j, x, b](int i, __m256 v) {
#pragma GCC unroll 4
        for (int t = 0; t < M; ++t) acc[j][t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x[t] + b * E + i), acc[j][t]);
      });
    }
  }
  for (int j = 0; j < nw; ++j)
    for (int t = 0; t < M; ++t) _mm256_storeu_ps(lanes + (j * M + t) * 8, acc[j][t]);
}

// All nrows rows against ntok (1..4) tokens, in tiles of NW rows: 4 chains for one token, 8 for
// two, 6 and 8 for three and four (AVX2 has 16 vector registers; the decode needs the rest).
template <DType T>
void lanes_rows(const uint8_t* w, int64_t row_bytes, int64_t nrows, const float* const* x, int ntok, int64_t n,
                float* lanes) {
  const auto tiles = [&](auto tile, int nw_max) {
    for (int64_t r = 0; r < nrows; r += nw_max) {
      const int nw = static_cast<int>(nrows - r < nw_max ? nrows - r : nw_max);
      tile(w + r * row_bytes, row_bytes, nw, x, n, lanes + r * ntok * 8);
    }
  };
  switch (ntok) {
    case 1: tiles(lanes_tile<T, 4, 1>, 4); break;
    case 2: tiles(lanes_tile<T, 4, 2>, 4); break;
    case 3: tiles(lanes_tile<T, 2, 3>, 2); break;
    default: tiles(lanes_tile<T, 2, 4>, 2); break;
  }
}

}  // namespace

void quant_detail::dequantize_row_avx2(DType t, const uint8_t* p, float* y, int64_t n) {
  switch (t) {
    case DType::F16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(load128(p + 2 * i)));
      for (; i < n; ++i) y[i] = quant_detail::load_f16_scalar(p + 2 * i);
      return;
    }
    case DType::BF16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p + 2 * i)), 16);
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(w));
      }
      for (; i < n; ++i) y[i] = quant_detail::load_bf16_scalar(p + 2 * i);
      return;
    }
    case DType::Q8_0: return dequantize_blocks<DType::Q8_0>(p, y, n);
    case DType::Q4_0: return dequantize_blocks<DType::Q4_0>(p, y, n);
    case DType::Q4_1: return dequantize_blocks<DType::Q4_1>(p, y, n);
    case DType::Q4_K: return dequantize_blocks<DType::Q4_K>(p, y, n);
    case DType::Q6_K: return dequantize_blocks<DType::Q6_K>(p, y, n);
    case DType::Q5_0: return dequantize_blocks<DType::Q5_0>(p, y, n);
    case DType::Q5_1: return dequantize_blocks<DType::Q5_1>(p, y, n);
    case DType::Q5_K: return dequantize_blocks<DType::Q5_K>(p, y, n);
    case DType::Q2_K: return dequantize_blocks<DType::Q2_K>(p, y, n);
    case DType::Q3_K: return dequantize_blocks<DType::Q3_K>(p, y, n);
    case DType::IQ4_NL: return dequantize_blocks<DType::IQ4_NL>(p, y, n);
    case DType::IQ4_XS: return dequantize_blocks<DType::IQ4_XS>(p, y, n);
    default: quant_detail::dequantize_row_scalar(t, p, y, n);  // F32: a copy
  }
}

bool quant_detail::dot_lanes8_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const float* const* x,
                                   int ntok, int64_t n, float* lanes) {
  switch (t) {
    case DType::Q8_0: lanes_rows<DType::Q8_0>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q4_0: lanes_rows<DType::Q4_0>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q4_1: lanes_rows<DType::Q4_1>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q4_K: lanes_rows<DType::Q4_K>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q6_K: lanes_rows<DType::Q6_K>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q5_0: lanes_rows<DType::Q5_0>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q5_1: lanes_rows<DType::Q5_1>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q5_K: lanes_rows<DType::Q5_K>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q2_K: lanes_rows<DType::Q2_K>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::Q3_K: lanes_rows<DType::Q3_K>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::IQ4_NL: lanes_rows<DType::IQ4_NL>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    case DType::IQ4_XS: lanes_rows<DType::IQ4_XS>(w, row_bytes, nrows, x, ntok, n, lanes); return true;
    default: return false;
  }
}

namespace {

// Sum of q[k] * x[8k..8k+7] over a 32-element block, as 8 lanes (2 chains for latency).
inline __m256 block_dot(const Block32& q, const float* x) {
  __m256 a = _mm256_mul_ps(q.v[0], _mm256_loadu_ps(x));
  __m256 b = _mm256_mul_ps(q.v[1], _mm256_loadu_ps(x + 8));
  a = _mm256_fmadd_ps(q.v[2], _mm256_loadu_ps(x + 16), a);
  b = _mm256_fmadd_ps(q.v[3], _mm256_loadu_ps(x + 24), b);
  return _mm256_add_ps(a, b);
}

// Plain types: four independent 8-lane accumulators; `load(i)` gives 8 floats of the row.
template <typename Load>
float dot_plain(const float* x, int64_t n, Load load, float (*scalar_at)(const uint8_t*, int64_t),
                const uint8_t* p, int64_t elem_bytes) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(p + i * elem_bytes, 32 * elem_bytes);
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load(i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(x + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += scalar_at(p, i) * x[i];
  return s;
}

// core/half.h's round_through_bf16 on 8 finite lanes, the same bits: round to nearest even at
// bit 16, an integer add of 0x7fff plus the kept part's lowest bit (which may carry into the
// exponent: the largest values round to inf, as they should).
inline __m256 round_bf16_finite(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  return _mm256_castsi256_ps(
      _mm256_and_si256(sum, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The same for any lanes: a NaN stays a NaN, quieted as round_through_bf16 does (the add could
// carry a NaN's payload into the exponent or the sign).
inline __m256 round_bf16(__m256 v) {
  const __m256i quiet =
      _mm256_and_si256(_mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x00400000)),
                       _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm256_blendv_ps(round_bf16_finite(v), _mm256_castsi256_ps(quiet),
                          _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// Whether every value of block p is finite, from its f16 scales alone: a quant times a finite
// scale, plus a finite offset, stays finite (at most 65504 * 63 * 32 + 65504 * 63, Q5_K's, far
// from FLT_MAX), while an inf or NaN scale gives inf or NaN values (inf * 0 = NaN).
template <DType T>
inline bool finite_scales(const uint8_t* p) {
  const auto finite = [](const uint8_t* h) { return (h[1] & 0x7c) != 0x7c; };  // exponent < 31
  if constexpr (T == DType::Q6_K)
    return finite(p + 208);
  else if constexpr (T == DType::Q2_K)
    return finite(p + 80) && finite(p + 82);
  else if constexpr (T == DType::Q3_K)
    return finite(p + 108);
  else if constexpr (T == DType::Q4_1 || T == DType::Q4_K || T == DType::Q5_1 || T == DType::Q5_K)
    return finite(p) && finite(p + 2);
  else
    return finite(p);  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
}

// A quantized row through decode_block: its exact values (dequantize_row's), each rounded to bf16
// first where kBf16, times x; four 8-lane accumulators, element i of a block into (i / 8) % 4.
// dot_row's path for the types without a hand-scheduled loop (Q5_0, Q5_1, Q5_K, Q2_K, Q3_K,
// IQ4_NL, IQ4_XS) and
// dot_row_bf16's for every block type. At bf16 a block with an inf or NaN scale takes the
// rounding that keeps NaNs (the only blocks that can have them).
template <DType T, bool kBf16>
float dot_blocks(const uint8_t* p, const float* x, int64_t n) {
  constexpr int64_t E = BlockOf<T>::elems, B = BlockOf<T>::bytes;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / E; ++b, p += B, x += E) {
    prefetch_ahead(p, B);
    // decode_block's emit: value i of the block, transformed by `value`, times x[i].
    const auto times_x = [&acc, x](auto value) {
      return [&acc, x, value](int i, __m256 v) {
        __m256& a = acc[(i / 8) % 4];
        a = _mm256_fmadd_ps(value(v), _mm256_loadu_ps(x + i), a);
      };
    };
    if constexpr (!kBf16)
      decode_block<T>(p, times_x([](__m256 v) { return v; }));
    else if (finite_scales<T>(p))
      decode_block<T>(p, times_x([](__m256 v) { return round_bf16_finite(v); }));
    else
      decode_block<T>(p, times_x([](__m256 v) { return round_bf16(v); }));
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

float f32_at(const uint8_t* p, int64_t i) {
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}
float f16_at(const uint8_t* p, int64_t i) {
  return quant_detail::load_f16_scalar(p + 2 * i);
}
float bf16_at(const uint8_t* p, int64_t i) {
  return quant_detail::load_bf16_scalar(p + 2 * i);
}

}  // namespace

float quant_detail::dot_row_avx2(DType t, const uint8_t* p, const float* x, int64_t n) {
  switch (t) {
    case DType::F32:
      return dot_plain(
          x, n, [p](int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i); },
          f32_at, p, 4);
    case DType::F16:
      return dot_plain(
          x, n, [p](int64_t i) { return _mm256_cvtph_ps(load128(p + 2 * i)); }, f16_at, p, 2);
    case DType::BF16:
      return dot_plain(
          x, n,
          [p](int64_t i) {
            return _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p + 2 * i)), 16));
          },
          bf16_at, p, 2);
    case DType::Q8_0: {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ8_0Bytes, x += kQK) {
        prefetch_ahead(p, kQ8_0Bytes);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16_fast(p)), block_dot(q8_0_values(p), x), acc);
      }
      return hsum(acc);
    }
    case DType::Q4_0: {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ4_0Bytes, x += kQK) {
        prefetch_ahead(p, kQ4_0Bytes);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16_fast(p)),
                              block_dot(q4_values(p + 2, true), x), acc);
      }
      return hsum(acc);
    }
    case DType::Q4_1: {
      // fma(q, d, m) is exactly the dequantized value (q*d is exact, see the top of the file), so
      // this is sum(value * x) in another order, with no cancellation between d*q and m.
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int64_t b = 0; b < n / kQK; ++b, p += kQ4_1Bytes, x += kQK) {
        prefetch_ahead(p, kQ4_1Bytes);
        const __m256 d = _mm256_set1_ps(load_f16_fast(p));
        const __m256 m = _mm256_set1_ps(load_f16_fast(p + 2));
        const Block32 q = q4_values(p + 4, false);
        for (int k = 0; k < 4; ++k)
          acc[k] =
              _mm256_fmadd_ps(_mm256_fmadd_ps(q.v[k], d, m), _mm256_loadu_ps(x + 8 * k), acc[k]);
      }
      return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
    case DType::Q4_K: {
      // As Q4_1: fmsub(q, d*sc, dmin*m) is exactly the dequantized value.
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ4_KBytes) {
        prefetch_ahead(p, kQ4_KBytes);
        float ds[8], dm[8];
        quant_detail::q4k_block_factors(p, load_f16_fast(p), load_f16_fast(p + 2), ds, dm);
        const uint8_t* qs = p + 16;
        for (int j = 0; j < 4; ++j, qs += 32) {
          Block32 q[2];
          q4k_chunk(qs, &q[0], &q[1]);
          for (int s = 0; s < 2; ++s, x += 32) {
            const __m256 d = _mm256_set1_ps(ds[2 * j + s]);
            const __m256 m = _mm256_set1_ps(dm[2 * j + s]);
            for (int k = 0; k < 4; ++k)
              acc[k] = _mm256_fmadd_ps(_mm256_fmsub_ps(q[s].v[k], d, m), _mm256_loadu_ps(x + 8 * k),
                                       acc[k]);
          }
        }
      }
      return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
    case DType::Q6_K: {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < n / kQKK; ++b, p += kQ6_KBytes) {
        prefetch_ahead(p, kQ6_KBytes);
        const float d = load_f16_fast(p + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        for (int h = 0; h < 2; ++h) {
          __m256i g[4];
          q6k_groups(p + 64 * h, p + 128 + 32 * h, g);
          for (int gi = 0; gi < 4; ++gi, x += 32) {
            const __m128i a = _mm256_castsi256_si128(g[gi]);
            const __m128i c = _mm256_extracti128_si256(g[gi], 1);
            // Two 16-element halves with their own scales.
            __m256 s0 = _mm256_mul_ps(i8x8_to_ps(a), _mm256_loadu_ps(x));
            s0 = _mm256_fmadd_ps(i8x8_to_ps(hi64(a)), _mm256_loadu_ps(x + 8), s0);
            __m256 s1 = _mm256_mul_ps(i8x8_to_ps(c), _mm256_loadu_ps(x + 16));
            s1 = _mm256_fmadd_ps(i8x8_to_ps(hi64(c)), _mm256_loadu_ps(x + 24), s1);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * gi])), s0,
                                  acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[8 * h + 2 * gi + 1])),
                                  s1, acc);
          }
        }
      }
      return hsum(acc);
    }
    case DType::Q5_0: return dot_blocks<DType::Q5_0, false>(p, x, n);
    case DType::Q5_1: return dot_blocks<DType::Q5_1, false>(p, x, n);
    case DType::Q5_K: return dot_blocks<DType::Q5_K, false>(p, x, n);
    case DType::Q2_K: return dot_blocks<DType::Q2_K, false>(p, x, n);
    case DType::Q3_K: return dot_blocks<DType::Q3_K, false>(p, x, n);
    case DType::IQ4_NL: return dot_blocks<DType::IQ4_NL, false>(p, x, n);
    case DType::IQ4_XS: return dot_blocks<DType::IQ4_XS, false>(p, x, n);
    default: return quant_detail::dot_row_scalar(t, p, x, n);  // throws: the caller checked
  }
}

namespace {

float f32_at_bf16(const uint8_t* p, int64_t i) {
  return quant_detail::round_bf16_scalar(f32_at(p, i));
}
float f16_at_bf16(const uint8_t* p, int64_t i) {
  return quant_detail::round_bf16_scalar(f16_at(p, i));
}

}  // namespace

float quant_detail::dot_row_bf16_avx2(DType t, const uint8_t* p, const float* x, int64_t n) {
  switch (t) {
    case DType::F32:
      return dot_plain(
          x, n,
          [p](int64_t i) {
            return round_bf16(_mm256_loadu_ps(reinterpret_cast<const float*>(p) + i));
          },
          f32_at_bf16, p, 4);
    case DType::F16:
      return dot_plain(
          x, n, [p](int64_t i) { return round_bf16(_mm256_cvtph_ps(load128(p + 2 * i))); },
          f16_at_bf16, p, 2);
    case DType::BF16:
      return dot_row_avx2(t, p, x, n);  // bf16 values already: rounding keeps them
    case DType::Q8_0:
      return dot_blocks<DType::Q8_0, true>(p, x, n);
    case DType::Q4_0:
      return dot_blocks<DType::Q4_0, true>(p, x, n);
    case DType::Q4_1:
      return dot_blocks<DType::Q4_1, true>(p, x, n);
    case DType::Q4_K:
      return dot_blocks<DType::Q4_K, true>(p, x, n);
    case DType::Q6_K:
      return dot_blocks<DType::Q6_K, true>(p, x, n);
    case DType::Q5_0:
      return dot_blocks<DType::Q5_0, true>(p, x, n);
    case DType::Q5_1:
      return dot_blocks<DType::Q5_1, true>(p, x, n);
    case DType::Q5_K:
      return dot_blocks<DType::Q5_K, true>(p, x, n);
    case DType::Q2_K:
      return dot_blocks<DType::Q2_K, true>(p, x, n);
    case DType::Q3_K:
      return dot_blocks<DType::Q3_K, true>(p, x, n);
    case DType::IQ4_NL:
      return dot_blocks<DType::IQ4_NL, true>(p, x, n);
    case DType::IQ4_XS:
      return dot_blocks<DType::IQ4_XS, true>(p, x, n);
    default:
      return quant_detail::dot_row_bf16_scalar(t, p, x, n);  // throws: the caller checked
  }
}

}  // namespace medtune

#endif  // __x86_64__

#if !defined(__x86_64__)
// No x86 kernels on this architecture; cpu_features never selects them, but the symbols exist.
namespace medtune {
void quant_detail::dequantize_row_avx2(DType t, const uint8_t* p, float* y, int64_t n) {
  dequantize_row_scalar(t, p, y, n);
}
float quant_detail::dot_row_avx2(DType t, const uint8_t* p, const float* x, int64_t n) {
  return dot_row_scalar(t, p, x, n);
}
float quant_detail::dot_row_bf16_avx2(DType t, const uint8_t* p, const float* x, int64_t n) {
  return dot_row_bf16_scalar(t, p, x, n);
}
bool quant_detail::dot_lanes8_avx2(DType, const uint8_t*, int64_t, int64_t, const float* const*, int, int64_t, float*) {
  return false;
}
}  // namespace medtune
#endif
