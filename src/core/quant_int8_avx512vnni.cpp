// int8 dot kernels, AVX-512 VNNI with AVX512VL (Intel Cascade Lake+, AMD Zen 4+): vpdpbusd on 256-bit registers, so lanes and order match the AVX2 path exactly.
// Status: executed on AMD Zen 4 (sessions 18 and 19): bit for bit the AVX2 path and the scalar reference (test_quant_int8 checks that wherever the CPU has it).
#include "core/error.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant_int8_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/block_bytes_avx2.h"

namespace medtune::int8_detail {
namespace {

inline __m256i dot4(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

#include "core/quant_int8_body.h"

}  // namespace

void dot_rows_avx512vnni(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x,
                   int64_t nb, int64_t ntok, float* y, int64_t y_stride) {
  dot_rows_body(t, w, row_bytes, nrows, x, nb, ntok, y, y_stride);
}

}  // namespace medtune::int8_detail
#else
namespace medtune::int8_detail {
// Never selected off x86 (cpu_features: scalar only); the symbol must exist.
void dot_rows_avx512vnni(DType, const uint8_t*, int64_t, int64_t, const int8::BlockQ8*, int64_t, int64_t, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
