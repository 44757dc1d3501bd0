// The int8 GEMM kernel (int8_gemm.h) for CPUs with AVX-VNNI and no AVX-512 VNNI (Intel Alder Lake
// and later client cores, Sierra Forest): int8_gemm_avx2_body.h on vpdpbusd (VEX, 256-bit), which
// adds a group's four u * q products to each int32 lane in one instruction. The rows are decoded
// as for AVX2 (decode_rows_avx2): nibbles for Q4_0, Q4_1 and Q4_K straight into the unsigned
// operand, one vpdpbusd per 32 products where AVX2 needs vpmaddubsw and an int16 add; for Q8_0
// and NF4, |w| with w's sign moved onto the tokens' bytes, two instructions where AVX2 needs four.
//
// Status: compiled here, NOT executed: no CPU this project has run on has AVX-VNNI (AMD Zen 3 and
// Zen 4 do not; QEMU 7.2's emulator lacks it). What is tested without it: the same body with
// each vpdpbusd replaced by AVX2 instructions giving the same lanes (gemm_avxvnni_emulated in
// int8_gemm_avx2.cpp) matches the scalar reference bit for bit; on a CPU with AVX-VNNI,
// test_quant_int8 runs this kernel itself against the reference.
#include "core/int8_gemm_kernel.h"
#include "core/quant_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace medtune::int8_detail {
namespace {

// The lanes never exceed int32: a block's 8 groups add at most 32 * 128 * 127 per lane.
inline __m256i signed_acc(__m256i s, __m256i u, __m256i q) {
  return _mm256_dpbusd_avx_epi32(s, u, q);
}
inline __m256i nibble_acc(__m256i s, __m256i u, __m256i q) {
  return _mm256_dpbusd_avx_epi32(s, u, q);
}
inline __m256i nibble_widen(__m256i s) {
  return s;
}

#include "core/int8_gemm_avx2_body.h"

}  // namespace

void gemm_avxvnni(DType t, const DecodedRows& rows, const int8::PackedTokens& x, float* y,
                  int64_t y_stride) {
  gemm_body(t, rows, x, y, y_stride);
}

}  // namespace medtune::int8_detail
#else
namespace medtune::int8_detail {
// Never selected off x86 (gemm_available() is false there); the symbol must exist.
void gemm_avxvnni(DType, const DecodedRows&, const int8::PackedTokens&, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
