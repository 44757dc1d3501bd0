#include "ops/dropout.h"

namespace medtune::ops {

void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const DropoutSite& d) {
  const uint64_t base = dropout::stream_base(d);
  const uint64_t threshold = dropout::threshold(d.p);
  const float scale = dropout::keep_scale(d.p);
#pragma omp parallel for schedule(static) if (N * in > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = d.row0 + (d.rows != nullptr ? d.rows[n] : n);
    const uint64_t first = static_cast<uint64_t>(row * in);
    for (int64_t j = 0; j < in; ++j) {
      const int64_t i = n * in + j;
      xd[i] = dropout::dropped(base, first + static_cast<uint64_t>(j), threshold) ? 0.0f : x[i] * scale;
    }
  }
}

}  // namespace medtune::ops
