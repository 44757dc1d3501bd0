// The body of the int8 dot kernels, shared by the per-ISA files quant_int8_<isa>.cpp: each file
// defines dot4(u, s) (8 int32 lanes, lane j = sum of u[4j+i] * s[4j+i], u unsigned, s signed
// bytes) with its instruction, then includes this file inside its own anonymous namespace, so no
// function here is shared between files compiled with different flags.
// The operations and their order are those stated in quant_int8.h; the scalar reference
// (int8::dot_scalar) performs the same ones and the tests compare the bits.
//
// Magnitudes: weights |w| <= 128 (a Q8_0 byte may be -128), activations |q| <= 127, so a
// vpmaddubsw pair sum is at most 2 * 128 * 127 = 32512 < 2^15: it never saturates, and the
// AVX2 and VNNI lanes hold the same exact integers.

// #include'd in an anonymous namespace after dot4(); needs <immintrin.h>, <cstring>, <cstdint>,
// <string>, <vector>, core/error.h, core/kquant_layout.h, core/nf4.h and core/block_bytes_avx2.h.

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  // Exact, like f16_to_f32, for every non-NaN half. Not _cvtsh_ss: GCC 12 builds its operand by
  // inserting the half into a register that still holds an earlier value, which in a loop chains
  // each block's conversion to the previous one's; vmovd from a general register starts afresh.
  // With fma1's builtin below: SmolLM2 Q4_1 int8 decode on Zen 3, 2 threads, 5 alternating
  // rounds, median 114 -> 132 tokens/s.
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

inline __m256i load_q(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 packed bytes -> 32 values: low nibbles are elements 0..15, high nibbles 16..31.
inline __m256i nibbles(const uint8_t* p) { return block_bytes::nibbles32(p); }

inline float fma1(float a, float b, float c) {  // one rounding, as std::fma
  // The builtin (one vfmadd on scalars, these files being compiled with -mfma) rather than
  // _mm_fmadd_ss on _mm_set_ss operands, whose zeroing inserts lengthened each block's chain.
  return __builtin_fmaf(a, b, c);
}

// A block's integer sum: the 8 lanes of p added in int32 (exact in any order), as a float (exact:
// |sum| < 2^24, quant_int8.h).
inline float block_sum(__m256i p) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtss_f32(_mm_cvtepi32_ps(s));  // in the vector unit: no round trip through a GPR
}

// Four blocks' integer sums at once, sums[k] = the 8 lanes of p[k] added (exact), as floats in
// lanes 0-3. Unpacks and adds (one micro-op each) rather than vphaddd (several on AMD Zen): in
// each 128-bit half, u01 = [p0 0+2, p1 0+2, p0 1+3, p1 1+3], then v = [p0, p1, p2, p3] summed over
// the half; the two halves added last.
inline __m128 block_sums4(const __m256i* p) {
  const __m256i u01 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
  const __m256i u23 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
  const __m256i v = _mm256_add_epi32(_mm256_unpacklo_epi64(u01, u23), _mm256_unpackhi_epi64(u01, u23));
  return _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// The super-block types (Q4_K, Q5_K, Q6_K, Q3_K, IQ4_XS) by super-block of 256: group grp (0..7)
// of 32 is one activation block.
template <DType D>
constexpr int64_t kSuperBytes = D == DType::Q4_K   ? kquant::kQ4KBytes
                                : D == DType::Q5_K ? block_bytes::kQ5KBytes
                                : D == DType::Q6_K ? kquant::kQ6KBytes
                                : D == DType::Q3_K ? kquant::kQ3KBytes
                                                   : kquant::kIq4xsBytes;

// How a group's integer lanes are formed: Q4_K and Q5_K's unsigned q straight into dot4, each group
// adding its min; Q6_K and Q3_K signed with two int scales per group (one per 16); IQ4_XS signed.
template <DType D>
constexpr bool kMinGroups = D == DType::Q4_K || D == DType::Q5_K;
template <DType D>
constexpr bool kScaledGroups = D == DType::Q6_K || D == DType::Q3_K;

// Group grp's 32 integers: Q4_K's and Q5_K's unsigned q (0..15, 0..31; kquant_layout.h,
// block_bytes_avx2.h), Q6_K's q - 32, Q3_K's -4..3 and IQ4_XS's table values (signed).
template <DType D>
inline __m256i group_values(const uint8_t* blk, int grp) {
  if constexpr (D == DType::Q4_K) {
    return block_bytes::q4k_values(blk, grp);
  } else if constexpr (D == DType::Q5_K) {
    return block_bytes::q5k_values(blk, grp);
  } else if constexpr (D == DType::Q6_K) {
    return block_bytes::q6k_values(blk, grp / 4, grp % 4);
  } else if constexpr (D == DType::Q3_K) {
    return block_bytes::q3k_values(blk, grp);
  } else {
    return block_bytes::iq4_values(blk + kquant::kIq4xsQsOffset + 16 * grp);
  }
}

// A super-block's float factors: ds[grp * stride], each group's d_w, and (kMinGroups)
// dm[grp * stride], its min
// (Q4_K and Q5_K: d * sc_grp and -(dmin * m_grp); Q6_K and Q3_K: d; IQ4_XS: d * (scale - 32), all
// exact in fp32); for kScaledGroups the 16 int scales as int8 (Q6_K's stored bytes, Q3_K's 6-bit
// values minus 32).
template <DType D>
inline void super_factors(const uint8_t* blk, float* ds, float* dm, __m128i* scales16,
                          int stride = 1) {
  if constexpr (kMinGroups<D>) {
    const float d = f16(blk), dmin = f16(blk + 2);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kquant::q4k_scale_min(j, blk + 4, &sc, &mn);
      ds[j * stride] = d * static_cast<float>(sc);
      dm[j * stride] = -(dmin * static_cast<float>(mn));
    }
  } else if constexpr (D == DType::Q6_K) {
    const float d = f16(blk + kquant::kQ6KDOffset);
    for (int j = 0; j < 8; ++j) ds[j * stride] = d;
    *scales16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kquant::kQ6KScaleOffset));
  } else if constexpr (D == DType::Q3_K) {
    const float d = f16(blk + kquant::kQ3KDOffset);
    for (int j = 0; j < 8; ++j) ds[j * stride] = d;
    alignas(16) int8_t sc[16];
    for (int i = 0; i < 16; ++i)
      sc[i] = static_cast<int8_t>(kquant::q3k_scale(i, blk + kquant::kQ3KScaleOffset) - 32);
    *scales16 = _mm_load_si128(reinterpret_cast<const __m128i*>(sc));
  } else {
    const float d = f16(blk);
    for (int j = 0; j < 8; ++j)
      ds[j * stride] = d * static_cast<float>(kquant::iq4xs_scale(j, blk) - 32);
  }
}

// Group grp's two scales as 16 int16 (elements 0-7 scale 2 grp, 8-15 scale 2 grp + 1): the int16
// pair sums of vpmaddubsw are in element order, so these multiply the group's first 16 products
// by the first scale and the last 16 by the second.
inline __m256i group_scales(__m128i scales16, int grp) {
  const long long lo = 0x0101010101010101LL * (2 * grp), hi = 0x0101010101010101LL * (2 * grp + 1);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales16, _mm_set_epi64x(hi, lo)));
}

// A signed group w (|w| <= 32) against the activations x with its two scales: 8 int32 lanes, lane
// j = scale(j / 4) * (the 4 products of elements 4j..4j+3): dot4's lanes multiplied by the lane
// scales, in two instructions. Exact: a vpmaddubsw pair sum is at most 2 * 32 * 127 = 8128, and
// vpmaddwd's int32 results at most 2 * 128 * 8128.
inline __m256i scaled_lanes(__m256i w, __m256i x, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                           scales);
}

// Group grp's 8 integer lanes against the token's activations xq.
template <DType D>
inline __m256i group_lanes(__m256i q, __m256i xq, __m128i scales16, int grp) {
  if constexpr (kMinGroups<D>)
    return dot4(q, xq);
  else if constexpr (kScaledGroups<D>)
    return scaled_lanes(q, xq, group_scales(scales16, grp));
  else
    return dot4(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q));
}

// NF4's int8 levels in both 128-bit halves, for nf4_values' lookup.
inline __m256i nf4_level_table() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(int8::nf4_levels())));
}

// Activation block b of an NF4 row (half b % 2 of the 64-element block b / 2): nf4_codes, its 32
// codes looked up in the int8 levels (element 2i is byte i's high nibble, 2i + 1 its low one);
// nf4_absmax, its block's absmax; nf4_values, the codes and *dw = absmax / 127.
inline __m256i nf4_codes(const uint8_t* w, int64_t b, __m256i levels) {
  const uint8_t* blk = w + nf4::kRowBlockBytes * (b / 2);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + 16 * (b % 2)));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4), lo = _mm_and_si128(bytes, m4);
  return _mm256_shuffle_epi8(
      levels, _mm256_set_m128i(_mm_unpackhi_epi8(hi, lo), _mm_unpacklo_epi8(hi, lo)));
}

inline float nf4_absmax(const uint8_t* w, int64_t b) {
  float absmax;
  std::memcpy(&absmax, w + nf4::kRowBlockBytes * (b / 2), 4);
  return absmax;
}

inline __m256i nf4_values(const uint8_t* w, int64_t b, __m256i levels, float* dw) {
  *dw = nf4_absmax(w, b) / 127.0f;
  return nf4_codes(w, b, levels);
}

// One token against one row of a legacy-block type D (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): the
// sums and float operations of int8::dot_scalar (so the same bits), with the dtype known at compile
// time, Q4_0's and Q5_0's integers unsigned (kUnsignedOffset), the row stream prefetched ahead,
// and the integer sums of 4 blocks reduced together (block_sums4: a quarter of the shuffles of 4
// block_sum). Measured on Zen 4, SmolLM2 decode at batch 1, 2 threads,
// medians of 5 alternating rounds on a noisy machine (tokens/s, Q4_1 / Q8_0): one call per row with
// the dtype switch inside, 135 / 133; this, without the prefetch, 151 / 161; with it, 163 / 163.
// Taking 2 or 4 rows at once (independent FMA chains) made decode 1.3-2.6x slower: interleaved
// row streams defeat the hardware prefetcher on weights larger than the cache (dot_eight_rows
// takes 8 at once, and prefetches their bytes in address order for that reason). The distance,
// 4096 bytes then, is 16384 since session 40: on an Intel Xeon (AVX-512 VNNI) decode after a
// 256-token prompt went from 120-128 to 138-143 tokens/s (Q4_1) and from 77-85 to 95 (Q8_0),
// 3 alternating rounds each; 32768 was no better. That is the distance of the 8-row and
// super-block kernels; the one-row kernel below (what a Q8_0 row read once from memory takes)
// gets its distance from the CPU at run time, int8::one_row_prefetch_bytes(): 4096 again on AMD
// Zen 4, where it decoded Q8_0 6-12% faster (medians; quant_int8.cpp says what was measured).
constexpr int64_t kPrefetchBytes = 16384;

// Block b of a row of type D against the token's block: block_ints, its 8 lane sums against the
// block's activation bytes xq; block_lanes, those and d_w (lane 0 of dm) with the min m_w (lane 1)
// of Q4_1 and Q5_1, whose two halves are adjacent: one conversion for both. Q4_0's and Q5_0's
// lanes are their unsigned integers' u (w = u - c, c = 8 or 16): the caller takes c * sum(x) off
// the block's sum (dot_one_token).
template <DType D>
inline __m256i block_ints(const uint8_t* blk, __m256i xq) {
  if constexpr (D == DType::Q4_1 || D == DType::Q5_1) {
    return dot4(D == DType::Q5_1 ? block_bytes::q5_values(blk + 4, blk + 8) : nibbles(blk + 4), xq);
  } else if constexpr (D == DType::Q8_0 || D == DType::IQ4_NL) {
    const __m256i w = D == DType::Q8_0 ? load_q(reinterpret_cast<const int8_t*>(blk + 2))
                                       : block_bytes::iq4_values(blk + 2);
    return dot4(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
  } else if constexpr (D == DType::Q5_0) {
    return dot4(block_bytes::q5_values(blk + 2, blk + 6), xq);
  } else {
    return dot4(nibbles(blk + 2), xq);
  }
}

template <DType D>
inline __m256i block_lanes(const uint8_t* blk, const int8::BlockQ8& xb, __m128* dm) {
  if constexpr (D == DType::Q4_1 || D == DType::Q5_1) {
    uint32_t h2;
    std::memcpy(&h2, blk, 4);
    *dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h2)));
  } else {
    *dm = _mm_set_ss(f16(blk));
  }
  return block_ints<D>(blk, load_q(xb.q));
}

// Bytes of one block of a legacy-block type D.
template <DType D>
constexpr int64_t kBlockBytes = D == DType::Q8_0   ? 34
                                : D == DType::Q4_0 ? 18
                                : D == DType::Q4_1 ? 20
                                : D == DType::Q5_0 ? block_bytes::kQ5_0Bytes
                                : D == DType::Q5_1 ? block_bytes::kQ5_1Bytes
                                                   : kquant::kIq4nlBytes;

// Q4_0 and Q5_0 against one token: their unsigned integers u (w = u - c) go straight into dot4,
// and c times the token block's integer sum is taken off each block's sum, xoff[b] = c * sum(x_b)
// (computed once per call, for all its rows): sum(w x) = sum(u x) - c sum(x), every term an
// integer below 2^24, so exact in float and the bits of the signed form, with three instructions
// fewer per block (the subtraction and the vpsignb pair). On an Intel Xeon (AVX-512 VNNI), SmolLM2
// decode at batch 1, 2 threads, medians of 6 alternating rounds, tokens/s: a Q5_0 file 154 -> 182,
// Q4_K_M (mostly Q5_0) 167 -> 174, a Q4_0 file (llama.cpp's Q2_K ftype) 188 -> 202.
template <DType D>
constexpr int kUnsignedOffset = D == DType::Q4_0   ? 8
                                : D == DType::Q5_0 ? 16
                                                   : 0;

// `ahead`: how many bytes past each block its prefetch reaches (int8::one_row_prefetch_bytes()).
template <DType D>
float dot_one_token(const uint8_t* w, const int8::BlockQ8* x, int64_t nb, const float* xoff,
                    int64_t ahead) {
  constexpr bool kMin = D == DType::Q4_1 || D == DType::Q5_1;
  constexpr bool kOffset = kUnsignedOffset<D> != 0;
  constexpr int64_t kBytes = kBlockBytes<D>;
  float acc = 0.0f, macc = 0.0f;
  // Block b's terms, in block order: acc = fma(d_w * d_x, sum, acc), macc = fma(m_w, s_x, macc).
  const auto add = [&](__m128 dm, float sum, const int8::BlockQ8& xb) {
    acc = fma1(_mm_cvtss_f32(dm) * xb.d, sum, acc);
    if constexpr (kMin) macc = fma1(_mm_cvtss_f32(_mm_movehdup_ps(dm)), xb.s, macc);
  };
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    __m256i p[4];
    __m128 dm[4];
    for (int k = 0; k < 4; ++k) {
      const uint8_t* blk = w + kBytes * (b + k);
      _mm_prefetch(reinterpret_cast<const char*>(blk + ahead), _MM_HINT_T0);
      p[k] = block_lanes<D>(blk, x[b + k], &dm[k]);
    }
    __m128 sums = block_sums4(p);
    if constexpr (kOffset) sums = _mm_sub_ps(sums, _mm_loadu_ps(xoff + b));
    add(dm[0], _mm_cvtss_f32(sums), x[b]);
    add(dm[1], _mm_cvtss_f32(_mm_movehdup_ps(sums)), x[b + 1]);
    add(dm[2], _mm_cvtss_f32(_mm_movehl_ps(sums, sums)), x[b + 2]);
    add(dm[3], _mm_cvtss_f32(_mm_shuffle_ps(sums, sums, 3)), x[b + 3]);
  }
  for (; b < nb; ++b) {
    __m128 dm;
    const __m256i p = block_lanes<D>(w + kBytes * b, x[b], &dm);
    add(dm, kOffset ? block_sum(p) - xoff[b] : block_sum(p), x[b]);
  }
  return kMin ? acc + macc : acc;
}

// The integer sums of 8 blocks, sums[r] = the 8 lanes of p[r] added (exact), as floats in row
// order: block_sums4's unpacks and adds on rows 0-3 and 4-7, then the two 128-bit halves of each
// added (rows 0-3 in the low half of the result).
inline __m256 block_sums8(const __m256i* p) {
  const auto pairs = [](__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  };
  const auto quads = [](__m256i u01, __m256i u23) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(u01, u23), _mm256_unpackhi_epi64(u01, u23));
  };
  const __m256i v0 = quads(pairs(p[0], p[1]), pairs(p[2], p[3]));  // rows 0-3 in each half
  const __m256i v1 = quads(pairs(p[4], p[5]), pairs(p[6], p[7]));  // rows 4-7 in each half
  return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_permute2x128_si256(v0, v1, 0x20),
                                             _mm256_permute2x128_si256(v0, v1, 0x31)));
}

// The first 4 bytes of 8 blocks (8 rows' block b, at blk[r]) as their two halves: *d = the first
// half of each (d_w), *m = the second (Q4_1's and Q5_1's m_w; for the other types the block's
// next two bytes, which the caller ignores), rows in lane order.
inline void block_heads8(const uint8_t* const* blk, __m256* d, __m256* m) {
  uint32_t h[8];
  for (int r = 0; r < 8; ++r) std::memcpy(&h[r], blk[r], 4);
  const __m256i v =
      _mm256_setr_epi32(static_cast<int>(h[0]), static_cast<int>(h[1]), static_cast<int>(h[2]),
                        static_cast<int>(h[3]), static_cast<int>(h[4]), static_cast<int>(h[5]),
                        static_cast<int>(h[6]), static_cast<int>(h[7]));
  // In each 128-bit half: the 4 first halves, then the 4 second ones; then the 64-bit quarters
  // reordered to [d rows 0-3, d rows 4-7, m rows 0-3, m rows 4-7].
  const __m256i split = _mm256_shuffle_epi8(
      v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9,
                          12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  const __m256i ordered = _mm256_permute4x64_epi64(split, _MM_SHUFFLE(3, 1, 2, 0));
  *d = _mm256_cvtph_ps(_mm256_castsi256_si128(ordered));
  *m = _mm256_cvtph_ps(_mm256_extracti128_si256(ordered, 1));
}

// Prefetches the cache lines of the addresses [begin, end), in address order.
inline void prefetch_lines(uintptr_t begin, uintptr_t end) {
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

// Eight rows of a legacy-block type D (row r at w + r * row_bytes) against one token: y[r] =
// dot_one_token<D>'s value for row r, bit for bit. Row r's chain of block terms is lane r of one
// vector, so a block costs the 8 rows one multiply and one FMA (two with a min) where one row at a
// time waits on a scalar FMA chain (4 cycles a block on Zen 3) and converts each block's scales
// alone; the integer sums and every float operation, in block order, are dot_one_token's (lane r
// performs row r's sequence). The 8 rows are one contiguous range of bytes, read 8 places at once:
// the hardware prefetcher does not follow that, so each block's step prefetches the range's lines
// kPrefetchBytes ahead in address order (one prefetch 16 KiB ahead of each row's block instead:
// Q8_0 rows streamed from memory 0.64x as fast as one row at a time). Zen 3, one thread, rows
// streamed from memory (`bench_int8_linear --tokens 1 --against int8rows --shapes 196608x576`,
// medians of 3 rounds): Q4_1 10.2 -> 14.8 GB/s, Q8_0 16.5 -> 19.4; from the cache, 1.5x both.
// (Q8_0's calls of one token still take the one-row kernel: rows_one_token says why.)
template <DType D>
void dot_eight_rows(const uint8_t* w, int64_t row_bytes, const int8::BlockQ8* x, int64_t nb,
                    const float* xoff, float* y) {
  constexpr bool kMin = D == DType::Q4_1 || D == DType::Q5_1;
  constexpr bool kOffset = kUnsignedOffset<D> != 0;
  constexpr int64_t kBytes = kBlockBytes<D>;
  __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_lines(ahead + 8 * kBytes * b, ahead + 8 * kBytes * (b + 1));
    const __m256i xq = load_q(x[b].q);
    const uint8_t* blk[8];
    __m256i p[8];
    for (int r = 0; r < 8; ++r) {
      blk[r] = w + r * row_bytes + kBytes * b;
      p[r] = block_ints<D>(blk[r], xq);
    }
    __m256 sums = block_sums8(p);
    if constexpr (kOffset) sums = _mm256_sub_ps(sums, _mm256_set1_ps(xoff[b]));
    __m256 dw, mw;
    block_heads8(blk, &dw, &mw);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), sums, acc);
    if constexpr (kMin) macc = _mm256_fmadd_ps(mw, _mm256_set1_ps(x[b].s), macc);
  }
  _mm256_storeu_ps(y, kMin ? _mm256_add_ps(acc, macc) : acc);
}

// One token against one row of a super-block type D: the integer sums and float operations of
// int8::dot_scalar (so the same bits), with the row stream prefetched ahead (each super-block's
// lines, kPrefetchBytes on) and the integer sums of 4 groups reduced together, as dot_one_token
// does for the legacy blocks. Before it, on an Intel Xeon (AVX-512 VNNI; SmolLM2 decode at batch 1,
// 2 threads), a file with Q6_K ffn_down decoded 12% slower than the all-Q8_0 one, 21% larger; with
// it, 3 alternating rounds, tokens/s: Q4_K_M 87-112 -> 119-141, Q4_K_S 87-119 -> 130-145, the Q6_K
// file 102-105 -> 115-125 (Q4_K_M under MEDTUNE_ISA=avx2: 108 -> 140).
template <DType D>
float dot_one_token_k(const uint8_t* w, const int8::BlockQ8* x, int64_t nb) {
  constexpr bool kMin = kMinGroups<D>;
  float acc = 0.0f, macc = 0.0f;
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const uint8_t* blk = w + kSuperBytes<D> * sb;
    for (int64_t line = 0; line < kSuperBytes<D>; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes + line), _MM_HINT_T0);
    float ds[8], dm[8];
    __m128i scales16 = _mm_setzero_si128();
    super_factors<D>(blk, ds, dm, &scales16);
    const int8::BlockQ8* xs = x + 8 * sb;
    for (int half = 0; half < 2; ++half) {
      __m256i p[4];
      for (int j = 0; j < 4; ++j) {
        const int grp = 4 * half + j;
        p[j] = group_lanes<D>(group_values<D>(blk, grp), load_q(xs[grp].q), scales16, grp);
      }
      const __m128 sums = block_sums4(p);
      const float sum[4] = {_mm_cvtss_f32(sums), _mm_cvtss_f32(_mm_movehdup_ps(sums)),
                            _mm_cvtss_f32(_mm_movehl_ps(sums, sums)),
                            _mm_cvtss_f32(_mm_shuffle_ps(sums, sums, 3))};
      for (int j = 0; j < 4; ++j) {
        const int grp = 4 * half + j;
        acc = fma1(ds[grp] * xs[grp].d, sum[j], acc);
        if constexpr (kMin) macc = fma1(dm[grp], xs[grp].s, macc);
      }
    }
  }
  return kMin ? acc + macc : acc;
}

// One token against one NF4 row: the integer sums and float operations of int8::dot_scalar (so the
// same bits), with the row stream prefetched ahead and 4 blocks' sums reduced together, as
// dot_one_token. The signed form stays: NF4's levels + 128 reach 255, whose vpmaddubsw pair sums
// (2 * 255 * 127) would saturate on AVX2. SmolLM2 quantized to NF4 at load (`generate
// --base-quant nf4 --precision int8`), decode at batch 1, Intel Xeon (AVX-512 VNNI), 2 threads, 3
// alternating rounds: 55-60 tokens/s through the one-row loop before it, 167-178 with this.
float dot_one_token_nf4(const uint8_t* w, const int8::BlockQ8* x, int64_t nb) {
  const __m256i levels = nf4_level_table();
  const auto lanes = [&](int64_t b, float* dw) {
    const __m256i v = nf4_values(w, b, levels, dw);
    return dot4(_mm256_sign_epi8(v, v), _mm256_sign_epi8(load_q(x[b].q), v));
  };
  float acc = 0.0f;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    // The two 36-byte blocks of these 4 activation blocks touch at most two cache lines.
    const char* next = reinterpret_cast<const char*>(w + nf4::kRowBlockBytes * (b / 2));
    _mm_prefetch(next + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(next + kPrefetchBytes + 2 * nf4::kRowBlockBytes - 1, _MM_HINT_T0);
    __m256i p[4];
    float dw[4];
    for (int k = 0; k < 4; ++k) p[k] = lanes(b + k, &dw[k]);
    const __m128 sums = block_sums4(p);
    acc = fma1(dw[0] * x[b].d, _mm_cvtss_f32(sums), acc);
    acc = fma1(dw[1] * x[b + 1].d, _mm_cvtss_f32(_mm_movehdup_ps(sums)), acc);
    acc = fma1(dw[2] * x[b + 2].d, _mm_cvtss_f32(_mm_movehl_ps(sums, sums)), acc);
    acc = fma1(dw[3] * x[b + 3].d, _mm_cvtss_f32(_mm_shuffle_ps(sums, sums, 3)), acc);
  }
  for (; b < nb; ++b) {
    float dw;
    const __m256i p = lanes(b, &dw);
    acc = fma1(dw * x[b].d, block_sum(p), acc);
  }
  return acc;
}

// Eight rows of a super-block type D against one token: y[r] = dot_one_token_k<D>'s value for
// row r, bit for bit, one lane per row as dot_eight_rows (whose reasons apply); each super-block's
// factors are decoded row by row into [group][row] order, one vector per group.
template <DType D>
void dot_eight_rows_k(const uint8_t* w, int64_t row_bytes, const int8::BlockQ8* x, int64_t nb,
                      float* y) {
  constexpr bool kMin = kMinGroups<D>;
  constexpr int64_t kBytes = kSuperBytes<D>;
  __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kPrefetchBytes;
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    prefetch_lines(ahead + 8 * kBytes * sb, ahead + 8 * kBytes * (sb + 1));
    const uint8_t* blk[8];
    alignas(32) float ds[8][8], dm[8][8];  // [group][row]
    __m128i scales16[8];
    for (int r = 0; r < 8; ++r) {
      blk[r] = w + r * row_bytes + kBytes * sb;
      scales16[r] = _mm_setzero_si128();
      super_factors<D>(blk[r], &ds[0][r], &dm[0][r], &scales16[r], 8);
    }
    const int8::BlockQ8* xs = x + 8 * sb;
    for (int grp = 0; grp < 8; ++grp) {
      const __m256i xq = load_q(xs[grp].q);
      __m256i p[8];
      for (int r = 0; r < 8; ++r)
        p[r] = group_lanes<D>(group_values<D>(blk[r], grp), xq, scales16[r], grp);
      const __m256 sums = block_sums8(p);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(ds[grp]), _mm256_set1_ps(xs[grp].d)), sums,
                            acc);
      if constexpr (kMin)
        macc = _mm256_fmadd_ps(_mm256_load_ps(dm[grp]), _mm256_set1_ps(xs[grp].s), macc);
    }
  }
  _mm256_storeu_ps(y, kMin ? _mm256_add_ps(acc, macc) : acc);
}

// Eight NF4 rows against one token: y[r] = dot_one_token_nf4's value for row r, bit for bit, one
// lane per row as dot_eight_rows; d_w = absmax / 127 for the 8 rows in one division.
void dot_eight_rows_nf4(const uint8_t* w, int64_t row_bytes, const int8::BlockQ8* x, int64_t nb,
                        float* y) {
  const __m256i levels = nf4_level_table();
  constexpr int64_t kHalfBytes = nf4::kRowBlockBytes / 2;  // a row's bytes per activation block
  __m256 acc = _mm256_setzero_ps();
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_lines(ahead + 8 * kHalfBytes * b, ahead + 8 * kHalfBytes * (b + 1));
    const __m256i xq = load_q(x[b].q);
    __m256i p[8];
    alignas(32) float absmax[8];
    for (int r = 0; r < 8; ++r) {
      const __m256i v = nf4_codes(w + r * row_bytes, b, levels);
      p[r] = dot4(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xq, v));
      absmax[r] = nf4_absmax(w + r * row_bytes, b);
    }
    const __m256 dw = _mm256_div_ps(_mm256_load_ps(absmax), _mm256_set1_ps(127.0f));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), block_sums8(p), acc);
  }
  _mm256_storeu_ps(y, acc);
}

// Rows [0, nrows) of type D against one token.
template <DType D>
void rows_one_token(const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x,
                    int64_t nb, float* y, [[maybe_unused]] bool streamed) {
  if constexpr (D == DType::Q4_K || D == DType::Q5_K || D == DType::Q6_K || D == DType::Q3_K ||
                D == DType::IQ4_XS) {
    int64_t r = 0;
    for (; r + 8 <= nrows; r += 8) dot_eight_rows_k<D>(w + r * row_bytes, row_bytes, x, nb, y + r);
    for (; r < nrows; ++r) y[r] = dot_one_token_k<D>(w + r * row_bytes, x, nb);
  } else if constexpr (D == DType::NF4) {
    int64_t r = 0;
    for (; r + 8 <= nrows; r += 8) dot_eight_rows_nf4(w + r * row_bytes, row_bytes, x, nb, y + r);
    for (; r < nrows; ++r) y[r] = dot_one_token_nf4(w + r * row_bytes, x, nb);
  } else {
    // Q4_0 and Q5_0: xoff[b] = c * sum(x_b), the integer sum as a float (exact).
    thread_local std::vector<float> xoff;
    if constexpr (kUnsignedOffset<D> != 0) {
      xoff.resize(static_cast<size_t>(nb));
      for (int64_t b = 0; b < nb; ++b)
        xoff[b] = kUnsignedOffset<D> * block_sum(dot4(_mm256_set1_epi8(1), load_q(x[b].q)));
    }
    // Q8_0 rows read once from memory (a call of one token: decode) one at a time: there the
    // 8-row kernel decoded SmolLM2 2-3% slower than one row at a time (Zen 3, 2 threads, 4 runs
    // of 8-12 alternating rounds, the runs' median ratios 0.95, 1.01, 0.96 and 0.98), both read
    // at the memory's bandwidth, the single stream helped by the hardware prefetcher; the other
    // types, whose one-row kernel was bound by its FMA chain, and every call of several tokens
    // (rows re-read from the cache) take the 8-row kernel.
    // On AMD Zen 4 (2 threads, `bench_forward --prompt-tokens 16 --decode-tokens 128`, session
    // 55) the 8-row kernel decoded SmolLM2 Q8_0 at 0.75x the one-row kernel's speed (4
    // alternating rounds, 147-156 against 183-213 tokens/s): the same choice.
    const bool eight = !(D == DType::Q8_0 && streamed);
    const int64_t ahead = int8::one_row_prefetch_bytes();
    int64_t r = 0;
    for (; eight && r + 8 <= nrows; r += 8)
      dot_eight_rows<D>(w + r * row_bytes, row_bytes, x, nb, xoff.data(), y + r);
    for (; r < nrows; ++r) y[r] = dot_one_token<D>(w + r * row_bytes, x, nb, xoff.data(), ahead);
  }
}

// Rows [0, nrows) of a type with an int8 kernel against one token; streamed: the call has no
// other token (its rows come from memory, not the cache).
void dot_rows_one_token(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                        const int8::BlockQ8* x, int64_t nb, float* y, bool streamed) {
  const auto run = [&](auto rows) { rows(w, row_bytes, nrows, x, nb, y, streamed); };
  switch (t) {
    case DType::Q8_0: return run(rows_one_token<DType::Q8_0>);
    case DType::Q4_0: return run(rows_one_token<DType::Q4_0>);
    case DType::Q4_1: return run(rows_one_token<DType::Q4_1>);
    case DType::Q5_0: return run(rows_one_token<DType::Q5_0>);
    case DType::Q5_1: return run(rows_one_token<DType::Q5_1>);
    case DType::Q4_K: return run(rows_one_token<DType::Q4_K>);
    case DType::Q5_K: return run(rows_one_token<DType::Q5_K>);
    case DType::Q6_K: return run(rows_one_token<DType::Q6_K>);
    case DType::Q3_K: return run(rows_one_token<DType::Q3_K>);
    case DType::IQ4_NL: return run(rows_one_token<DType::IQ4_NL>);
    case DType::IQ4_XS: return run(rows_one_token<DType::IQ4_XS>);
    case DType::NF4: return run(rows_one_token<DType::NF4>);
    default:  // the callers (quant_int8.cpp's check_row) refuse other types first
      throw Internal("int8 dot: no row kernel for " + std::string(dtype_name(t)));
  }
}

// Rows r < nrows (at w + r * row_bytes) against ntok tokens: y[k * y_stride + r], one token at a
// time through the one-token kernels. A call's rows (16 from linear_forward_int8) stay in the
// cache from one token to the next. Until session 47 tokens went 4 at a time through each row
// (every weight block decoded once per 4 tokens, one FMA chain per row); with the 8-row
// one-token kernels token by token is faster at 4, 8 and 12 tokens: Q4_1 1.5-1.6x, Q8_0 1.1x
// (the 49152-row lm_head, 30 MB) to 2.0x (576 x 576) (Zen 3, 1 thread, the binaries alternating:
// `bench_int8_linear --against int8rows --tokens 4,8,12`).
void dot_rows_body(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                   const int8::BlockQ8* x, int64_t nb, int64_t ntok, float* y, int64_t y_stride) {
  for (int64_t k = 0; k < ntok; ++k)
    dot_rows_one_token(t, w, row_bytes, nrows, x + k * nb, nb, y + k * y_stride, ntok == 1);
}
