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

// #include'd in an anonymous namespace after dot4(); needs <immintrin.h>, <cstring>, <cstdint> and
// core/kquant_layout.h.

constexpr int kTokTile = 4;  // tokens per pass over a weight row (each block decoded once)

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
inline __m256i nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

// (acc0+acc4 + acc2+acc6) + (acc1+acc5 + acc3+acc7), as quant_int8.h states.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float fma1(float a, float b, float c) {  // one rounding, as std::fma
  // The builtin (one vfmadd on scalars, these files being compiled with -mfma) rather than
  // _mm_fmadd_ss on _mm_set_ss operands, whose zeroing inserts lengthened each block's chain.
  return __builtin_fmaf(a, b, c);
}

// Signed weights (Q8_0, Q4_0): |w| as unsigned bytes, the sign moved onto the activations.
template <int T>
inline void accumulate_signed(__m256i w, float dw, const int8::BlockQ8* const* xb, __m256* acc) {
  const __m256i aw = _mm256_sign_epi8(w, w);
  for (int k = 0; k < T; ++k) {
    const __m256i p = dot4(aw, _mm256_sign_epi8(load_q(xb[k]->q), w));
    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[k]->d), _mm256_cvtepi32_ps(p), acc[k]);
  }
}

template <int T>
void dot_tile(DType t, const uint8_t* w, const int8::BlockQ8* x, int64_t nb, float* y,
              int64_t y_stride) {
  __m256 acc[T];
  float macc[T];
  for (int k = 0; k < T; ++k) {
    acc[k] = _mm256_setzero_ps();
    macc[k] = 0.0f;
  }
  const int8::BlockQ8* xb[T];
  for (int64_t b = 0; b < nb; ++b) {
    for (int k = 0; k < T; ++k) xb[k] = x + k * nb + b;
    if (t == DType::Q8_0) {
      const uint8_t* blk = w + 34 * b;
      accumulate_signed<T>(load_q(reinterpret_cast<const int8_t*>(blk + 2)), f16(blk), xb, acc);
    } else if (t == DType::Q4_0) {
      const uint8_t* blk = w + 18 * b;
      accumulate_signed<T>(_mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8)), f16(blk), xb, acc);
    } else {  // Q4_1: unsigned weights go straight into the unsigned operand
      const uint8_t* blk = w + 20 * b;
      const float dw = f16(blk), mw = f16(blk + 2);
      const __m256i q = nibbles(blk + 4);
      for (int k = 0; k < T; ++k) {
        const __m256i p = dot4(q, load_q(xb[k]->q));
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[k]->d), _mm256_cvtepi32_ps(p), acc[k]);
        macc[k] = fma1(mw, xb[k]->s, macc[k]);
      }
    }
  }
  for (int k = 0; k < T; ++k) y[k * y_stride] = hsum(acc[k]) + macc[k];
}

// Q4_K, one super-block (8 activation blocks) at a time: sub-block k is a Q4_1-like block with
// scale d*sc_k and min -(dmin*m_k) (kquant_layout.h), its unsigned nibbles straight into dot4.
template <int T>
void dot_tile_q4k(const uint8_t* w, const int8::BlockQ8* x, int64_t nb, float* y, int64_t y_stride) {
  __m256 acc[T];
  float macc[T];
  for (int k = 0; k < T; ++k) {
    acc[k] = _mm256_setzero_ps();
    macc[k] = 0.0f;
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const uint8_t* blk = w + kquant::kQ4KBytes * sb;
    const float d = f16(blk), dmin = f16(blk + 2);
    float ds[8], dm[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kquant::q4k_scale_min(j, blk + 4, &sc, &mn);
      ds[j] = d * static_cast<float>(sc);
      dm[j] = -(dmin * static_cast<float>(mn));
    }
    for (int pair = 0; pair < 4; ++pair) {
      const __m256i bytes = load_q(reinterpret_cast<const int8_t*>(blk + kquant::kQ4KQsOffset + 32 * pair));
      const __m256i q[2] = {_mm256_and_si256(bytes, m4), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4)};
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * pair + half;
        const int64_t b = 8 * sb + sub;
        for (int k = 0; k < T; ++k) {
          const int8::BlockQ8& xb = x[k * nb + b];
          const __m256i p = dot4(q[half], load_q(xb.q));
          acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(ds[sub] * xb.d), _mm256_cvtepi32_ps(p), acc[k]);
          macc[k] = fma1(dm[sub], xb.s, macc[k]);
        }
      }
    }
  }
  for (int k = 0; k < T; ++k) y[k * y_stride] = hsum(acc[k]) + macc[k];
}

// Q6_K, one super-block at a time: each group of 32 (q - 32, signed) with two int8 scales, one
// per 16 elements = lanes 0-3 and 4-7; the lane sums are multiplied by them in int32 (exact).
template <int T>
void dot_tile_q6k(const uint8_t* w, const int8::BlockQ8* x, int64_t nb, float* y, int64_t y_stride) {
  __m256 acc[T];
  for (int k = 0; k < T; ++k) acc[k] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03), k32 = _mm256_set1_epi8(32);
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const uint8_t* blk = w + kquant::kQ6KBytes * sb;
    const float d = f16(blk + kquant::kQ6KDOffset);
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + kquant::kQ6KScaleOffset);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql[2] = {load_q(reinterpret_cast<const int8_t*>(blk + 64 * h)),
                             load_q(reinterpret_cast<const int8_t*>(blk + 64 * h + 32))};
      const __m256i qh = load_q(reinterpret_cast<const int8_t*>(blk + 128 + 32 * h));
      for (int g = 0; g < 4; ++g) {
        const __m256i lo = g < 2 ? _mm256_and_si256(ql[g & 1], m4)
                                 : _mm256_and_si256(_mm256_srli_epi16(ql[g & 1], 4), m4);
        // The 2 high bits, masked before the 16-bit shift so nothing crosses into the next byte.
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2), 4);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), k32);  // -32..31
        const __m256i aq = _mm256_sign_epi8(q, q);
        const int s0 = sc[8 * h + 2 * g], s1 = sc[8 * h + 2 * g + 1];
        const __m256i lane_mul = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
        const int64_t b = 8 * sb + 4 * h + g;
        for (int k = 0; k < T; ++k) {
          const int8::BlockQ8& xb = x[k * nb + b];
          const __m256i p = _mm256_mullo_epi32(dot4(aq, _mm256_sign_epi8(load_q(xb.q), q)), lane_mul);
          acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(p), acc[k]);
        }
      }
    }
  }
  for (int k = 0; k < T; ++k) y[k * y_stride] = hsum(acc[k]);
}

// NF4, by half-block of 32: the codes (high nibble first) looked up in the int8 levels, signed
// weights as Q8_0's; d_w = absmax / 127 (quant_int8.h).
template <int T>
void dot_tile_nf4(const uint8_t* w, const int8::BlockQ8* x, int64_t nb, float* y, int64_t y_stride) {
  __m256 acc[T];
  for (int k = 0; k < T; ++k) acc[k] = _mm256_setzero_ps();
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(int8::nf4_levels())));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const int8::BlockQ8* xb[T];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + 36 * (b / 2);
    float absmax;
    std::memcpy(&absmax, blk, 4);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + 16 * (b % 2)));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4), lo = _mm_and_si128(bytes, m4);
    // Element 2i is byte i's high nibble, 2i + 1 its low one.
    const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(hi, lo), _mm_unpacklo_epi8(hi, lo));
    for (int k = 0; k < T; ++k) xb[k] = x + k * nb + b;
    accumulate_signed<T>(_mm256_shuffle_epi8(levels, codes), absmax / 127.0f, xb, acc);
  }
  for (int k = 0; k < T; ++k) y[k * y_stride] = hsum(acc[k]);
}

template <int T>
void dot_tile_any(DType t, const uint8_t* w, const int8::BlockQ8* x, int64_t nb, float* y, int64_t y_stride) {
  if (t == DType::Q4_K) return dot_tile_q4k<T>(w, x, nb, y, y_stride);
  if (t == DType::Q6_K) return dot_tile_q6k<T>(w, x, nb, y, y_stride);
  if (t == DType::NF4) return dot_tile_nf4<T>(w, x, nb, y, y_stride);
  dot_tile<T>(t, w, x, nb, y, y_stride);
}

// One token against one row of a legacy-block type D (Q8_0, Q4_0, Q4_1): exactly the operations
// of dot_tile<1> (so the same bits), with the dtype known at compile time and the row stream
// prefetched ahead. Measured on Zen 4, SmolLM2 decode at batch 1, 2 threads, medians of 5
// alternating rounds on a noisy machine (tokens/s, Q4_1 / Q8_0): one call per row with the dtype
// switch inside, 135 / 133; this, without the prefetch, 151 / 161; with it, 163 / 163. Taking 2
// or 4 rows at once (independent FMA chains) made decode 1.3-2.6x slower: interleaved row
// streams defeat the hardware prefetcher on weights larger than the cache.
constexpr int64_t kPrefetchBytes = 4096;

template <DType D>
float dot_one_token(const uint8_t* w, const int8::BlockQ8* x, int64_t nb) {
  constexpr int64_t kBytes = D == DType::Q8_0 ? 34 : D == DType::Q4_0 ? 18 : 20;
  __m256 acc = _mm256_setzero_ps();
  float macc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + kBytes * b;
    const int8::BlockQ8* xb[1] = {x + b};
    _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes), _MM_HINT_T0);
    if constexpr (D == DType::Q8_0) {
      accumulate_signed<1>(load_q(reinterpret_cast<const int8_t*>(blk + 2)), f16(blk), xb, &acc);
    } else if constexpr (D == DType::Q4_0) {
      accumulate_signed<1>(_mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8)), f16(blk), xb, &acc);
    } else {
      const float dw = f16(blk), mw = f16(blk + 2);
      const __m256i p = dot4(nibbles(blk + 4), load_q(xb[0]->q));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[0]->d), _mm256_cvtepi32_ps(p), acc);
      macc = fma1(mw, xb[0]->s, macc);
    }
  }
  return hsum(acc) + macc;
}

// Rows [0, nrows) of a legacy-block type against one token; false for other types.
bool dot_rows_one_token(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x,
                        int64_t nb, float* y) {
  const auto run = [&](auto dot) {
    for (int64_t r = 0; r < nrows; ++r) y[r] = dot(w + r * row_bytes, x, nb);
  };
  switch (t) {
    case DType::Q8_0: run(dot_one_token<DType::Q8_0>); return true;
    case DType::Q4_0: run(dot_one_token<DType::Q4_0>); return true;
    case DType::Q4_1: run(dot_one_token<DType::Q4_1>); return true;
    default: return false;
  }
}

// Rows r < nrows (at w + r * row_bytes) against ntok tokens: y[k * y_stride + r]. Tokens in tiles
// of 4 per row (each weight block decoded once per 4 tokens); the last ntok % 4 tokens one at a
// time.
void dot_rows_body(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x, int64_t nb,
                   int64_t ntok, float* y, int64_t y_stride) {
  const int64_t full = ntok / kTokTile * kTokTile;
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t k = 0; k < full; k += kTokTile)
      dot_tile_any<kTokTile>(t, w + r * row_bytes, x + k * nb, nb, y + k * y_stride + r, y_stride);
  for (int64_t k = full; k < ntok; ++k)
    if (!dot_rows_one_token(t, w, row_bytes, nrows, x + k * nb, nb, y + k * y_stride))
      for (int64_t r = 0; r < nrows; ++r) dot_tile_any<1>(t, w + r * row_bytes, x + k * nb, nb, y + k * y_stride + r, y_stride);
}
