// int8 dot kernels, AVX2: vpmaddubsw (u8 x s8 pairs -> s16, never saturating here) then vpmaddwd with ones (pairs -> s32).
// Status: executed and tested on AMD Zen 3.
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
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

#include "core/quant_int8_body.h"

}  // namespace

void dot_rows_avx2(DType t, const uint8_t* w, int64_t row_bytes, int64_t nrows, const int8::BlockQ8* x,
                   int64_t nb, int64_t ntok, float* y, int64_t y_stride) {
  dot_rows_body(t, w, row_bytes, nrows, x, nb, ntok, y, y_stride);
}

}  // namespace medtune::int8_detail
#else
namespace medtune::int8_detail {
// Never selected off x86 (cpu_features: scalar only); the symbol must exist.
void dot_rows_avx2(DType, const uint8_t*, int64_t, int64_t, const int8::BlockQ8*, int64_t, int64_t, float*, int64_t) {}
}  // namespace medtune::int8_detail
#endif
