// The int8 GEMM's portable parts (int8_gemm.h): packing the tokens, the scalar reference, the
// per-thread scratch and the calls into the kernel files (int8_gemm_<isa>.cpp, which decode the
// rows and multiply).
#include "core/int8_gemm.h"

#include <cmath>
#include <cstring>
#include <string>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/int8_gemm_kernel.h"
#include "core/quant_int8_kernels.h"

namespace medtune::int8 {

namespace {

constexpr int kGroups = static_cast<int>(kBlock / 4);  // 4-byte groups per block: one vpdpbusd each

// The calling thread's decoded rows, kept between calls (no allocation per call once grown).
struct DecodeScratch {
  std::vector<uint8_t> w;
  std::vector<float> d, m;
  std::vector<int32_t> sc;
};

}  // namespace

bool gemm_supports(DType t) {
  return int8::supports(t);  // every type with an int8 kernel
}

bool gemm_available() {
  static const bool available = active_isa() >= Isa::kAvx2;
  return available;
}

Isa gemm_isa() {
  static const Isa isa = active_isa() >= Isa::kAvxVnni ? active_isa() : Isa::kAvx2;
  return isa;
}

void size_packed(int64_t nb, int64_t ntok, PackedTokens* out) {
  out->ntok = ntok;
  out->nb = nb;
  out->panels = (ntok + kGemmTokens - 1) / kGemmTokens;
  const size_t cells = static_cast<size_t>(out->panels * nb);
  // Grown only: the packing writes every element of the panels in use, so a shrink and regrow
  // (a model's projections alternate between widths) would only zero-fill memory for nothing.
  const auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(out->q, cells * kBlock * kGemmTokens);
  grow(out->comp, cells * kGemmTokens);
  grow(out->d, cells * kGemmTokens);
  grow(out->s, cells * kGemmTokens);
}

namespace {

// The sum of a block's 32 integers (exact in int32 in any order).
int32_t block_sum(const int8_t* q) {
#if defined(__AVX2__)
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  // 1 * q in pairs (unsigned 1 by signed q: |pair| <= 256, no saturation), then in fours.
  const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v),
                                        _mm256_set1_epi16(1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
#else
  int32_t sum = 0;
  for (int e = 0; e < kBlock; ++e) sum += q[e];
  return sum;
#endif
}

// Token lane `lane` of panel p: its nb blocks x[0, nb), or zeros where x is null (the last
// panel's padding: q = 0, d = s = 0, so the lane computes 0).
void put_token(const BlockQ8* x, int64_t p, int64_t lane, PackedTokens* out) {
  const int64_t nb = out->nb;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t cell = p * nb + b;
    int8_t* q = out->q.data() + (cell * kGroups * kGemmTokens + lane) * 4;
    const auto at = static_cast<size_t>(cell * kGemmTokens + lane);
    if (x == nullptr) {
      for (int g = 0; g < kGroups; ++g) std::memset(q + g * kGemmTokens * 4, 0, 4);
      out->comp[at] = 0;
      out->d[at] = out->s[at] = 0.0f;
      continue;
    }
    for (int g = 0; g < kGroups; ++g) std::memcpy(q + g * kGemmTokens * 4, x[b].q + 4 * g, 4);
    out->comp[at] = -128 * block_sum(x[b].q);
    out->d[at] = x[b].d;
    out->s[at] = x[b].s;
  }
}

}  // namespace

void pack_panel(const BlockQ8* x, int64_t p, PackedTokens* out) {
  for (int64_t lane = 0; lane < kGemmTokens; ++lane) {
    const int64_t k = p * kGemmTokens + lane;
    put_token(k < out->ntok ? x + k * out->nb : nullptr, p, lane, out);
  }
}

void quantize_pack_panel(const float* x, int64_t p, PackedTokens* out) {
  quantize_pack_panel_with(gemm_isa() == Isa::kAvx512Vnni ? Isa::kAvx512Vnni : Isa::kAvx2, x, p,
                           out);
}

void quantize_pack_panel_with(Isa isa, const float* x, int64_t p, PackedTokens* out) {
  if (isa != Isa::kAvx2 && isa != Isa::kAvx512Vnni)
    throw Internal(std::string("int8 quantize_pack_panel: no ") + isa_name(isa) + " version");
  if (!cpu_supports(isa))
    throw Internal(std::string("int8 quantize_pack_panel: this CPU cannot run ") + isa_name(isa));
  if (isa == Isa::kAvx512Vnni) {
    int8_detail::quantize_pack_panel_avx512vnni(x, p, out);
    return;
  }
  const int64_t nb = out->nb, cols = nb * kBlock;
  thread_local std::vector<BlockQ8> token;  // one token's blocks, hot in L1 when packed
  if (token.size() < static_cast<size_t>(nb)) token.resize(static_cast<size_t>(nb));
  for (int64_t lane = 0; lane < kGemmTokens; ++lane) {
    const int64_t k = p * kGemmTokens + lane;
    if (k < out->ntok) quantize_activations(x + k * cols, cols, token.data());
    put_token(k < out->ntok ? token.data() : nullptr, p, lane, out);
  }
}

void pack_tokens(const BlockQ8* x, int64_t nb, int64_t ntok, PackedTokens* out) {
  size_packed(nb, ntok, out);
  for (int64_t p = 0; p < out->panels; ++p) pack_panel(x, p, out);
}

namespace {

enum class Kernel { kAvx2, kAvxVnni, kAvxVnniEmulated, kAvx512Vnni };

void run_kernel(Kernel k, DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                const PackedTokens& x, float* y, int64_t y_stride, const uint8_t* next_rows,
                int64_t next_nrows) {
  if (!gemm_supports(t))
    throw Internal("int8 gemm: no GEMM kernel for " + std::string(dtype_name(t)));
  const int64_t nb = x.nb;
  const bool k_quant = t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
                       t == DType::Q6_K || t == DType::IQ4_XS;
  if ((k_quant && nb % 8 != 0) || (t == DType::NF4 && nb % 2 != 0))
    throw Internal("int8 gemm: " + std::string(dtype_name(t)) + " rows of " + std::to_string(nb) +
                   " blocks of 32 do not hold whole blocks of the type");
  thread_local DecodeScratch s;
  const size_t cells = static_cast<size_t>(nb * nrows);
  if (s.d.size() < cells) {
    s.w.resize(cells * kBlock);
    s.d.resize(cells);
    s.m.resize(cells);
    s.sc.resize(cells * 2);
  }
  const bool min = has_min(t);
  const int8_detail::DecodedRows rows{
      .nrows = nrows,
      .nb = nb,
      .w = s.w.data(),
      .d = s.d.data(),
      .m = min ? s.m.data() : nullptr,
      .sc = t == DType::Q6_K || t == DType::Q3_K ? s.sc.data() : nullptr,
      .next = next_rows,
      .next_bytes = next_rows == nullptr ? 0 : next_nrows * row_bytes};
  if (k == Kernel::kAvx512Vnni) {
    int8_detail::decode_rows_avx512vnni(t, w, row_bytes, nrows, nb, s.w.data(), s.d.data(),
                                        s.m.data(), s.sc.data());
    int8_detail::gemm_avx512vnni(rows, x, y, y_stride);
    return;
  }
  int8_detail::decode_rows_avx2(t, w, row_bytes, nrows, nb, s.w.data(), s.d.data(), s.m.data(),
                                s.sc.data());
  if (k == Kernel::kAvxVnni)
    int8_detail::gemm_avxvnni(t, rows, x, y, y_stride);
  else if (k == Kernel::kAvxVnniEmulated)
    int8_detail::gemm_avxvnni_emulated(t, rows, x, y, y_stride);
  else
    int8_detail::gemm_avx2(t, rows, x, y, y_stride);
}

}  // namespace

void gemm_rows_with(Isa isa, DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                    const PackedTokens& x, float* y, int64_t y_stride, const uint8_t* next_rows,
                    int64_t next_nrows) {
  if (isa == Isa::kScalar)
    throw Internal(std::string("int8 gemm: no GEMM kernel for the ") + isa_name(isa) + " path");
  if (!cpu_supports(isa))
    throw Internal(std::string("int8 gemm: this CPU cannot run the ") + isa_name(isa) + " kernel");
  const Kernel k = isa == Isa::kAvx512Vnni ? Kernel::kAvx512Vnni
                   : isa == Isa::kAvxVnni  ? Kernel::kAvxVnni
                                           : Kernel::kAvx2;
  run_kernel(k, t, w, row_bytes, nrows, x, y, y_stride, next_rows, next_nrows);
}

void gemm_rows_avxvnni_emulated(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows,
                                const PackedTokens& x, float* y, int64_t y_stride) {
  if (!cpu_supports(Isa::kAvx2))
    throw Internal("int8 gemm: the emulated AVX-VNNI kernel needs AVX2");
  run_kernel(Kernel::kAvxVnniEmulated, t, w, row_bytes, nrows, x, y, y_stride, nullptr, 0);
}

void gemm_rows(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const PackedTokens& x,
               float* y, int64_t y_stride, const uint8_t* next_rows, int64_t next_nrows) {
  if (!gemm_available())
    throw Internal("int8 gemm: the scalar path (MEDTUNE_ISA) has no GEMM kernel");
  gemm_rows_with(gemm_isa(), t, w, row_bytes, nrows, x, y, y_stride, next_rows, next_nrows);
}

}  // namespace medtune::int8
