// Activation quantization, the scalar reference and the run-time choice of kernel for the int8
// route (quant_int8.h states the numerics every path reproduces).
#include "core/quant_int8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/half.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8_kernels.h"

namespace medtune::int8_detail {

namespace {
float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
}  // namespace

void weight_block(DType t, const uint8_t* row, int64_t b, WeightBlock* wb) {
  using int8::kBlock;
  using int8::nf4_levels;
  std::fill(std::begin(wb->lane_mul), std::end(wb->lane_mul), 1);
  wb->m = 0.0f;
  switch (t) {
    case DType::Q8_0: {
      const uint8_t* blk = row + 34 * b;
      wb->d = load_f16(blk);
      for (int e = 0; e < kBlock; ++e) wb->w[e] = static_cast<int8_t>(blk[2 + e]);
      return;
    }
    case DType::Q4_0: {
      const uint8_t* blk = row + 18 * b;
      wb->d = load_f16(blk);
      for (int e = 0; e < kBlock / 2; ++e) {
        wb->w[e] = (blk[2 + e] & 0xF) - 8;
        wb->w[e + kBlock / 2] = (blk[2 + e] >> 4) - 8;
      }
      return;
    }
    case DType::Q4_1: {
      const uint8_t* blk = row + 20 * b;
      wb->d = load_f16(blk);
      wb->m = load_f16(blk + 2);
      for (int e = 0; e < kBlock / 2; ++e) {
        wb->w[e] = blk[4 + e] & 0xF;
        wb->w[e + kBlock / 2] = blk[4 + e] >> 4;
      }
      return;
    }
    // Q5_0: d * (q - 16), Q5_1: d * q + m; q = nibble | fifth bit << 4 (core/block_bytes_avx2.h).
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool min = t == DType::Q5_1;
      const uint8_t* blk = row + (min ? 24 : 22) * b;
      wb->d = load_f16(blk);
      if (min) wb->m = load_f16(blk + 2);
      uint32_t qh;
      std::memcpy(&qh, blk + (min ? 4 : 2), 4);
      const uint8_t* qs = blk + (min ? 8 : 6);
      for (int e = 0; e < kBlock; ++e) {
        const int nib = e < kBlock / 2 ? qs[e] & 0xF : qs[e - kBlock / 2] >> 4;
        wb->w[e] = (nib | static_cast<int>((qh >> e) & 1) << 4) - (min ? 0 : 16);
      }
      return;
    }
    case DType::Q5_K: {  // sub-block k as Q4_K's, with bit k of qh[e] as each element's fifth bit
      const uint8_t* blk = row + 176 * (b / 8);
      const int k = static_cast<int>(b % 8);
      uint8_t sc, mn;
      kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
      wb->d = load_f16(blk) * static_cast<float>(sc);
      wb->m = -(load_f16(blk + 2) * static_cast<float>(mn));
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + 48 + 32 * (k / 2);
      for (int e = 0; e < kBlock; ++e)
        wb->w[e] = ((k % 2 == 0) ? (qs[e] & 0xF) : (qs[e] >> 4)) | ((qh[e] >> k) & 1) << 4;
      return;
    }
    case DType::Q4_K: {  // sub-block k: (d*sc)*q - dmin*m, both products exact in fp32
      const uint8_t* blk = row + kquant::kQ4KBytes * (b / 8);
      const int k = static_cast<int>(b % 8);
      uint8_t sc, mn;
      kquant::q4k_scale_min(k, blk + 4, &sc, &mn);
      wb->d = load_f16(blk) * static_cast<float>(sc);
      wb->m = -(load_f16(blk + 2) * static_cast<float>(mn));
      const uint8_t* qs = blk + kquant::kQ4KQsOffset + 32 * (k / 2);
      for (int e = 0; e < kBlock; ++e) wb->w[e] = (k % 2 == 0) ? (qs[e] & 0xF) : (qs[e] >> 4);
      return;
    }
    case DType::Q3_K: {  // group k of 32: two sub-blocks of 16 with 6-bit scales - 32
      const uint8_t* blk = row + kquant::kQ3KBytes * (b / 8);
      const int k = static_cast<int>(b % 8);
      wb->d = load_f16(blk + kquant::kQ3KDOffset);
      const uint8_t* qs = blk + kquant::kQ3KQsOffset + 32 * (k / 4);
      for (int e = 0; e < kBlock; ++e)
        wb->w[e] = ((qs[e] >> (2 * (k % 4))) & 3) - (((blk[e] >> k) & 1) ? 0 : 4);
      for (int j = 0; j < 8; ++j)
        wb->lane_mul[j] = kquant::q3k_scale(2 * k + j / 4, blk + kquant::kQ3KScaleOffset) - 32;
      return;
    }
    case DType::Q6_K: {  // group g of half h: two sub-blocks of 16 with int8 scales
      const uint8_t* blk = row + kquant::kQ6KBytes * (b / 8);
      const int h = static_cast<int>(b % 8) / 4, g = static_cast<int>(b % 4);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + kquant::kQ6KScaleOffset) + 8 * h + 2 * g;
      wb->d = load_f16(blk + kquant::kQ6KDOffset);
      for (int e = 0; e < kBlock; ++e) wb->w[e] = kquant::q6k_value(blk + 64 * h, blk + 128 + 32 * h, g, e) - 32;
      for (int j = 0; j < 8; ++j) wb->lane_mul[j] = sc[j / 4];
      return;
    }
    case DType::IQ4_NL:  // ggml's table values (kquant::kIq4nlValues), Q4_0's nibble order
    case DType::IQ4_XS: {  // group k of 32 of a super-block: d_w = d * (scale - 32), exact
      const bool xs = t == DType::IQ4_XS;
      const uint8_t* blk = xs ? row + kquant::kIq4xsBytes * (b / 8) : row + kquant::kIq4nlBytes * b;
      const int k = static_cast<int>(b % 8);
      wb->d = load_f16(blk);
      if (xs) wb->d *= static_cast<float>(kquant::iq4xs_scale(k, blk) - 32);
      const uint8_t* qs = xs ? blk + kquant::kIq4xsQsOffset + 16 * k : blk + 2;
      for (int e = 0; e < kBlock / 2; ++e) {
        wb->w[e] = kquant::kIq4nlValues[qs[e] & 0xF];
        wb->w[e + kBlock / 2] = kquant::kIq4nlValues[qs[e] >> 4];
      }
      return;
    }
    case DType::NF4: {  // half b % 2 of block b / 2: fp32 absmax | 32 bytes, high nibble first
      const uint8_t* blk = row + nf4::kRowBlockBytes * (b / 2);
      float absmax;
      std::memcpy(&absmax, blk, 4);
      wb->d = absmax / 127.0f;
      const uint8_t* bytes = blk + 4 + 16 * (b % 2);
      for (int e = 0; e < kBlock; ++e) {
        const int code = e % 2 == 0 ? bytes[e / 2] >> 4 : bytes[e / 2] & 0xF;
        wb->w[e] = nf4_levels()[code];
      }
      return;
    }
    default:
      throw Internal("int8 dot: no int8 kernel for " + std::string(dtype_name(t)));
  }
}

}  // namespace medtune::int8_detail

namespace medtune::int8 {

namespace {

void dot_rows_scalar(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const BlockQ8* x, int64_t nb,
                     int64_t ntok, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t k = 0; k < ntok; ++k) y[k * y_stride + r] = dot_scalar(t, w + r * row_bytes, x + k * nb, nb);
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
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
         t == DType::Q5_1 || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::NF4;
}

bool has_min(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K;
}

const int8_t* nf4_levels() {
  static const std::array<int8_t, 16> levels = [] {
    std::array<int8_t, 16> l{};
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int8_t>(std::lround(nf4::kCode[i] * 127.0f));
    return l;
  }();
  return levels.data();
}

namespace {

void quantize_block_scalar(const float* x, BlockQ8& o) {
  float amax = 0.0f;
  bool finite = true;
  for (int e = 0; e < kBlock; ++e) {
    finite = finite && std::isfinite(x[e]);
    amax = std::max(amax, std::fabs(x[e]));
  }
  if (!finite) {  // NaN or inf: a NaN result, as the fp32 path would give (quant_int8.h)
    o.d = o.s = std::nanf("");
    std::memset(o.q, 0, sizeof o.q);
    return;
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

#if defined(__AVX2__)
// quantize_block_scalar's operations on 8 lanes (the baseline, x86-64-v3, has AVX2): the same
// maximum (exact in any order), quotient, reciprocal, products and round-half-even, and clamps
// whose operand order gives std::max/std::min's result for a NaN product (d denormal: 1/d = inf,
// 0 * inf); so the bits are the scalar's (test_quant_int8 compares them).
void quantize_block_avx2(const float* x, BlockQ8& o) {
  __m256 v[4];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), zero = _mm256_setzero_ps();
  __m256 amax8 = zero, finite8 = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    amax8 = _mm256_max_ps(amax8, _mm256_and_ps(v[j], abs_mask));
    // v * 0 == 0 holds exactly for the finite values (inf * 0 and NaN * 0 are NaN).
    finite8 = _mm256_and_ps(finite8, _mm256_cmp_ps(_mm256_mul_ps(v[j], zero), zero, _CMP_EQ_OQ));
  }
  if (_mm256_movemask_ps(finite8) != 0xFF) {
    o.d = o.s = std::nanf("");
    std::memset(o.q, 0, sizeof o.q);
    return;
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  o.d = _mm_cvtss_f32(m4) / 127.0f;
  const __m256 id = _mm256_set1_ps(o.d != 0.0f ? 1.0f / o.d : 0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i qi[4];
  __m256i sum = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    qi[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));  // integral: exact
    sum = _mm256_add_epi32(sum, qi[j]);
  }
  // int32 -> int8 in element order (packs interleave 128-bit lanes; the permute undoes it).
  const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q),
                      _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
  o.s = o.d * static_cast<float>(_mm_cvtsi128_si32(s4));
}
#endif

void check_activations(int64_t n) {
  if (n % kBlock != 0)
    throw Internal("int8 quantize_activations: n = " + std::to_string(n) + " is not a multiple of 32");
}

}  // namespace

void quantize_activations(const float* x, int64_t n, BlockQ8* out) {
  check_activations(n);
#if defined(__AVX2__)
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_avx2(x + b * kBlock, out[b]);
#else
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_scalar(x + b * kBlock, out[b]);
#endif
}

void quantize_activations_scalar(const float* x, int64_t n, BlockQ8* out) {
  check_activations(n);
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_scalar(x + b * kBlock, out[b]);
}

float dot_scalar(DType t, const uint8_t* w, const BlockQ8* x, int64_t nb) {
  const bool min = has_min(t);
  float acc = 0.0f, macc = 0.0f;
  int8_detail::WeightBlock wb;
  for (int64_t b = 0; b < nb; ++b) {
    int8_detail::weight_block(t, w, b, &wb);
    int32_t isum = 0;  // exact: |isum| <= 32 * 128 * 127 (Q6_K: 8 * 128 * 4 * 32 * 127) < 2^24
    for (int e = 0; e < kBlock; ++e) isum += wb.lane_mul[e / 4] * (wb.w[e] * x[b].q[e]);
    acc = std::fma(wb.d * x[b].d, static_cast<float>(isum), acc);
    if (min) macc = std::fma(wb.m, x[b].s, macc);
  }
  return min ? acc + macc : acc;  // without a min, no + 0 (it would turn -0 into +0)
}

namespace {
void check_row(DType t, int64_t nb) {
  if (!supports(t)) throw Internal("int8 dot: no int8 kernel for " + std::string(dtype_name(t)));
  if ((t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) && nb % 8 != 0)
    throw Internal("int8 dot: " + std::string(dtype_name(t)) + " rows hold whole 256-element super-blocks; got " +
                   std::to_string(nb) + " blocks of 32");
  if (t == DType::NF4 && nb % 2 != 0)
    throw Internal("int8 dot: NF4 rows hold whole 64-element blocks; got " + std::to_string(nb) + " blocks of 32");
}
}  // namespace

void dot_row_block_with(Isa isa, DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const BlockQ8* x,
                        int64_t nb, int64_t ntok, float* y, int64_t y_stride) {
  check_row(t, nb);
  if (!cpu_supports(isa)) throw Internal(std::string("int8 dot: this CPU cannot run ") + isa_name(isa));
  kernel_of(isa)(t, w, row_bytes, nrows, x, nb, ntok, y, y_stride);
}

void dot_rows_with(Isa isa, DType t, const uint8_t* w, const BlockQ8* x, int64_t nb, int64_t ntok, float* y,
                   int64_t y_stride) {
  dot_row_block_with(isa, t, w, 0, 1, x, nb, ntok, y, y_stride);
}

Isa kernel_isa() {
  return active_isa();
}

// The one-row kernel's prefetch distance follows the memory system, not the instruction set. It
// was 4096 bytes, chosen on Zen 4, until session 40 made it 16384 after an Intel Xeon (AVX-512
// VNNI, AMX) decoded SmolLM2 Q4_1 and Q8_0 12-15% faster with it. On AMD Zen 4 (family 25 with
// AVX-512) 4096 is the faster again (session 55, 2 threads, `bench_forward --precision int8`,
// decode of 64 tokens after a 256-token prompt, or 32 after 16 on the 7B shape, the binaries
// alternating; this host's memory moved between runs, so only per-round ratios count): this
// change against 16384, SmolLM2 Q8_0 0.96-1.10x (6 rounds, median 1.06x), a Llama-2-7B-shaped
// Q8_0 file (bench/make_scaled_gguf.py) 0.92-1.29x (6 rounds, median 1.12x); in a sweep before
// it 2048 and 8192 were within the noise of 4096, 32768 slower than 16384 on SmolLM2 and 65536
// no faster on the 7B shape. Zen 3 (also family 25) and Zen 5 (26) were not measured with 4096
// since session 40 and keep 16384, as Intel does.
int64_t one_row_prefetch_bytes(const CpuFeatures& f) {
  const bool zen4 = f.amd && f.family == 25 && f.avx512f;
  return zen4 ? 4096 : 16384;
}

int64_t one_row_prefetch_bytes() {
  static const int64_t bytes = one_row_prefetch_bytes(cpu_features());
  return bytes;
}

void dot_row_block(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const BlockQ8* x, int64_t nb,
                   int64_t ntok, float* y, int64_t y_stride) {
  static const int8_detail::DotRowsFn kernel = kernel_of(kernel_isa());
  check_row(t, nb);
  kernel(t, w, row_bytes, nrows, x, nb, ntok, y, y_stride);
}

void dot_rows(DType t, const uint8_t* w, const BlockQ8* x, int64_t nb, int64_t ntok, float* y, int64_t y_stride) {
  dot_row_block(t, w, 0, 1, x, nb, ntok, y, y_stride);
}

}  // namespace medtune::int8
