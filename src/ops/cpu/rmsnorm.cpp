#include <cmath>

#include "ops/ops.h"

namespace medtune::ops {

namespace ref {
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(eps)));
    if (rstd != nullptr) rstd[n] = r;
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = w[c] * (xr[c] * r);
  }
}
}  // namespace ref

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    float* yr = y + n * C;
    // fp32 sum in 8 independent lanes (vectorizes); error ~ C * 2^-24 relative, well inside 1e-4.
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
      for (int j = 0; j < 8; ++j) lanes[j] += xr[c + j] * xr[c + j];
    float ss = 0;
    for (; c < C; ++c) ss += xr[c] * xr[c];
    for (int j = 0; j < 8; ++j) ss += lanes[j];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    if (rstd != nullptr) rstd[n] = r;
    for (c = 0; c < C; ++c) yr[c] = w[c] * (xr[c] * r);
  }
}

}  // namespace medtune::ops
