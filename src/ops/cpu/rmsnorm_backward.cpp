// RMSNorm backward.
//
// Derivation, one row (drop n), with u = w ⊙ dy the gradient wrt the normalized x·r:
//   y_c = w_c·x_c·r,   r = (m + eps)^-1/2,   m = (1/C)·Σ_c x_c²
//   ∂r/∂x_i = −½(m + eps)^-3/2 · 2x_i/C = −r³·x_i/C
//   dx_i = Σ_c u_c·∂(x_c·r)/∂x_i = u_i·r + Σ_c u_c·x_c·∂r/∂x_i = r·u_i − x_i·r³/C · Σ_c u_c·x_c
//   dw_c = Σ_n dy_c·x_c·r
// rstd comes from the forward, so the backward costs two passes over the row and no sqrt.
#include <algorithm>
#include <vector>

#include "ops/backward.h"

namespace medtune::ops {

namespace ref {
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N,
                      int64_t C) {
  // dw before dx: dx may alias dy.
  if (dw != nullptr)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n)
        acc += static_cast<double>(dy[n * C + c]) * static_cast<double>(x[n * C + c]) *
               static_cast<double>(rstd[n]);
      dw[c] = static_cast<T>(static_cast<double>(dw[c]) + acc);
    }
  for (int64_t n = 0; n < N; ++n) {
    const double r = static_cast<double>(rstd[n]);
    double dot = 0;  // Σ_c (w ⊙ dy ⊙ x)
    for (int64_t c = 0; c < C; ++c)
      dot += static_cast<double>(w[c]) * static_cast<double>(dy[n * C + c]) *
             static_cast<double>(x[n * C + c]);
    const double k = r * r * r / static_cast<double>(C) * dot;
    for (int64_t c = 0; c < C; ++c)
      dx[n * C + c] = static_cast<T>(r * static_cast<double>(w[c]) * static_cast<double>(dy[n * C + c]) -
                                     static_cast<double>(x[n * C + c]) * k);
  }
}
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);
}  // namespace ref

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C) {
  // dw first (dx may alias dy). Parallel over column blocks: each dw_c is summed over n by one
  // thread, in order, so the result does not depend on scheduling. Within a block the inner loop
  // runs along a row segment, which keeps the reads of dy and x contiguous.
  if (dw != nullptr) {
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      float acc[kBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float r = rstd[n];
        const float* dyr = dy + n * C;
        const float* xr = x + n * C;
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += dyr[c] * (xr[c] * r);
      }
      for (int64_t c = c0; c < c1; ++c) dw[c] += acc[c - c0];
    }
  }
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* dyr = dy + n * C;
    const float* xr = x + n * C;
    float* dxr = dx + n * C;
    const float r = rstd[n];
    // Σ_c w⊙dy⊙x in 8 independent fp32 lanes (vectorizes), as the forward's sum of squares.
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= C; c += 8)
      for (int j = 0; j < 8; ++j) lanes[j] += w[c + j] * dyr[c + j] * xr[c + j];
    float dot = 0;
    for (; c < C; ++c) dot += w[c] * dyr[c] * xr[c];
    for (int j = 0; j < 8; ++j) dot += lanes[j];
    const float k = r * r * r / static_cast<float>(C) * dot;
    for (c = 0; c < C; ++c) dxr[c] = r * (w[c] * dyr[c]) - xr[c] * k;
  }
}

}  // namespace medtune::ops
