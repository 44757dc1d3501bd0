// The int8 GEMM's 256-bit kernel body (int8_gemm.h), shared by int8_gemm_avx2.cpp and
// int8_gemm_avxvnni.cpp as quant_int8_body.h is by the row kernels: 3 rows x 16 tokens per tile
// (a packed token panel in two ymm of 8 tokens' 4 activation bytes), each row's 4 weight bytes
// broadcast from memory against them. The rows come decoded by decode_rows_avx2: the nibble for
// Q4_0, Q4_1 and Q4_K, w itself for Q8_0, NF4 and the 5-bit types (int8_gemm_avx2.cpp says why).
//
// #include'd inside each file's anonymous namespace after <immintrin.h>, <algorithm>, <cstring>,
// the kernel headers and three functions that say how the 32 products of a row's group of 4
// bytes with 8 tokens' 4 bytes each are added to 8 int32 lanes (lane j: token j's 4 products):
//   nibble_acc(s, u, q)  u the nibbles 0..15, q the tokens' signed bytes; s may hold int16 pair
//                        sums (AVX2, 8 groups of a block summed in int16: at most 30480);
//   nibble_widen(s)      s of nibble_acc after a block's 8 groups -> int32 lane sums;
//   signed_acc(s, u, q)  u = |w| <= 128, q the tokens' bytes with w's sign; s int32.
// Every block sum is an exact integer whichever instructions form it, so every kernel built on
// this body gives the scalar reference's bits (test_quant_int8).
// No include guard: a file may include it more than once, in different namespaces.

constexpr int kGroups = 8;                     // 4-byte groups per block of 32
constexpr int64_t kPanel = int8::kGemmTokens;  // tokens per packed panel (16)
constexpr int64_t kHalf = 8;                   // tokens per ymm: one tile's tokens

// kSignedScaled: Q6_K and Q3_K, signed, each block half (groups 0-3, 4-7) summed on its own and
// multiplied by its int scale (rw.sc) before the halves are added.
enum class Form { kNibble, kNibbleMinus8, kSigned, kSignedScaled };

Form form_of(DType t) {
  if (t == DType::Q4_0) return Form::kNibbleMinus8;
  if (t == DType::Q4_1 || t == DType::Q4_K) return Form::kNibble;
  if (t == DType::Q6_K || t == DType::Q3_K) return Form::kSignedScaled;
  return Form::kSigned;  // Q8_0, NF4, Q5_0, IQ4_NL, IQ4_XS, and Q5_1 and Q5_K with their mins
}

// Groups [G0, G1) of the R rows at block cell c0 against the TV token vectors at qb, added into
// sums. The bounds are template arguments (constant trip counts). Against the GEMM before Q6_K's
// scaled form (one loop over all 8 groups), MEDTUNE_ISA=avx2 prompts on the Intel Xeon, 3
// alternating rounds, medians: a lambda with run-time bounds 0.95x (Q4_1) and 0.94x (Q8_0); this
// 0.99x and 0.93x, the older binary itself spreading 613-689 tokens/s on Q8_0. Not settled.
template <int R, int TV, Form F, int G0, int G1>
inline void add_groups(const DecodedRows& rw, int64_t c0, const int8_t* qb,
                       __m256i (&sums)[R][TV]) {
  // Unrolled by 2 only: fully unrolled, GCC 12 regrouped the (associative) int16 sums into a
  // tree, computed every product first and spilled most of them to the stack.
#pragma GCC unroll 2
  for (int g = G0; g < G1; ++g) {
    __m256i a[TV];
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v)
      a[v] =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + g * kPanel * 4 + v * kHalf * 4));
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      int32_t w4;
      std::memcpy(&w4, rw.w + (c0 + i) * 32 + 4 * g, 4);
      const __m256i wb = _mm256_set1_epi32(w4);  // the row's 4 bytes, beside each token's 4
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) {
        if constexpr (F == Form::kSigned || F == Form::kSignedScaled)
          sums[i][v] = signed_acc(sums[i][v], _mm256_sign_epi8(wb, wb), _mm256_sign_epi8(a[v], wb));
        else
          sums[i][v] = nibble_acc(sums[i][v], wb, a[v]);
      }
    }
  }
}

// Rows [r0, r0 + R) against the 8 * TV tokens of panel p from its half h on (8 per ymm); writes
// the first `valid` of them.
template <int R, int TV, Form F, bool kMin>
void tile(const DecodedRows& rw, int64_t r0, const int8::PackedTokens& x, int64_t p, int64_t h,
          int64_t valid, float* y, int64_t y_stride) {
  __m256 acc[R][TV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) acc[i][v] = _mm256_setzero_ps();
  const int64_t nb = x.nb;
  const int64_t cell0 = p * nb;  // the panel's block 0
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = x.q.data() + (cell0 + b) * kGroups * kPanel * 4 + h * kHalf * 4;
    const int64_t c0 = b * rw.nrows + r0;  // row r0's cell in block b
    // The block's sums: int32, or int16 pair sums for the nibble forms where nibble_acc keeps them
    // (AVX2).
    __m256i s[R][TV], s1[R][TV];  // s1: the scaled form's second half
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) s[i][v] = s1[i][v] = _mm256_setzero_si256();
    if constexpr (F == Form::kSignedScaled) {  // isum = sc0 * half 0 + sc1 * half 1, exact
      add_groups<R, TV, F, 0, kGroups / 2>(rw, c0, qb, s);
      add_groups<R, TV, F, kGroups / 2, kGroups>(rw, c0, qb, s1);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i sc0 = _mm256_set1_epi32(rw.sc[2 * (c0 + i)]),
                      sc1 = _mm256_set1_epi32(rw.sc[2 * (c0 + i) + 1]);
#pragma GCC unroll 2
        for (int v = 0; v < TV; ++v)
          s[i][v] =
              _mm256_add_epi32(_mm256_mullo_epi32(s[i][v], sc0), _mm256_mullo_epi32(s1[i][v], sc1));
      }
    } else {
      add_groups<R, TV, F, 0, kGroups>(rw, c0, qb, s);
    }
    const int64_t tok = (cell0 + b) * kPanel + h * kHalf;  // the tile's first token in d, comp
    __m256 dx[TV];
    __m256i minus8[TV];  // Q4_0: -8 * sum(q) per token, from the packed -128 * sum(q)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) {
      dx[v] = _mm256_loadu_ps(x.d.data() + tok + v * kHalf);
      minus8[v] = _mm256_setzero_si256();
      if constexpr (F == Form::kNibbleMinus8)
        minus8[v] = _mm256_srai_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.comp.data() + tok + v * kHalf)), 4);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 dw = _mm256_set1_ps(rw.d[c0 + i]);
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) {
        __m256i isum = s[i][v];
        if constexpr (F == Form::kNibble || F == Form::kNibbleMinus8) isum = nibble_widen(isum);
        if constexpr (F == Form::kNibbleMinus8) isum = _mm256_add_epi32(isum, minus8[v]);
        acc[i][v] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[v]), _mm256_cvtepi32_ps(isum), acc[i][v]);
      }
    }
  }
  if constexpr (kMin) {  // macc = fma(m_w, s_x, macc) over the blocks in order, then acc + macc
    __m256 macc[R][TV];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) macc[i][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const float* sp = x.s.data() + (cell0 + b) * kPanel + h * kHalf;
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256 mw = _mm256_set1_ps(rw.m[b * rw.nrows + r0 + i]);
#pragma GCC unroll 2
        for (int v = 0; v < TV; ++v)
          macc[i][v] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(sp + v * kHalf), macc[i][v]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < TV; ++v) acc[i][v] = _mm256_add_ps(acc[i][v], macc[i][v]);
  }
  // Out: y holds tokens in rows; the R x 8TV tile goes through a small buffer.
  alignas(32) float out[R][TV * kHalf];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < TV; ++v) _mm256_store_ps(out[i] + v * kHalf, acc[i][v]);
  float* yp = y + (p * kPanel + h * kHalf) * y_stride + r0;
  for (int64_t k = 0; k < valid; ++k)
    for (int i = 0; i < R; ++i) yp[k * y_stride + i] = out[i][k];
}

// Tiles of 3 rows x 16 tokens: 6 sums + 6 accumulators + 2 token vectors + a broadcast in the 16
// ymm registers. Measured on Zen 3 (5 alternating runs, one thread) against 4 x 8: ~1.3x for Q4_1
// and Q8_0. A panel's last 8 tokens or fewer take 3 x 8 tiles, leftover rows 1-row tiles. The
// scaled form's two half sums per row and token (Q6_K, Q3_K) take 2 rows per tile.
template <Form F, bool kMin>
void run(const DecodedRows& rw, const int8::PackedTokens& x, float* y, int64_t y_stride) {
  constexpr int R = F == Form::kSignedScaled ? 2 : 3;
  const int64_t tiles = x.panels * (rw.nrows / R + rw.nrows % R);
  int64_t k = 0;  // tiles done
  for (int64_t p = 0; p < x.panels; ++p) {
    const int64_t valid = std::min<int64_t>(kPanel, x.ntok - p * kPanel);
    // The panel's tiles of TV token vectors: R rows at a time, then the leftover rows one by one.
    const auto panel = [&]<int TV>() {
      int64_t r = 0;
      for (; r + R <= rw.nrows; r += R) {
        prefetch_share(rw, k++, tiles);
        tile<R, TV, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
      }
      for (; r < rw.nrows; ++r) {
        prefetch_share(rw, k++, tiles);
        tile<1, TV, F, kMin>(rw, r, x, p, 0, valid, y, y_stride);
      }
    };
    if (valid > kHalf)
      panel.template operator()<2>();
    else
      panel.template operator()<1>();
  }
}

// y[k * y_stride + i] for every row i and packed token k.
void gemm_body(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y, int64_t y_stride) {
  switch (form_of(t)) {
    case Form::kSigned:
      if (t == DType::Q5_1 || t == DType::Q5_K) return run<Form::kSigned, true>(rows, x, y, y_stride);
      return run<Form::kSigned, false>(rows, x, y, y_stride);
    case Form::kNibbleMinus8:
      return run<Form::kNibbleMinus8, false>(rows, x, y, y_stride);
    case Form::kNibble:  // Q4_1 and Q4_K: both have mins
      return run<Form::kNibble, true>(rows, x, y, y_stride);
    case Form::kSignedScaled:
      return run<Form::kSignedScaled, false>(rows, x, y, y_stride);
  }
}

