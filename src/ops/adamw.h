// The optimizer's elementwise arithmetic on fp32 (or float64) buffers, below the backends: the CPU
// backend runs these, a GPU backend its kernels with the same rounding (src/gpu/adamw.cu), and
// train/optimizer.h and train/grad_clip.h define the training semantics on top.
#pragma once

#include <cstdint>

namespace medtune::ops {

// AdamW's hyper-parameters other than the learning rate (train::AdamWConfig's).
struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// One AdamW update of n elements at 1-based `step` with learning rate `lr`: p updated, m and v
// (the moments) updated, with torch's operations in torch's order and rounding (adamw.cpp).
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWHyper& h, double lr, int64_t step);

// init + sum of x[i]^2 in double, one running sum in index order: chained over several buffers
// (the result of one as the next one's init) it is one running sum over all of them, whatever
// the thread count.
double sum_squares(const float* x, int64_t n, double init);

// x[i] *= s (one fp32 rounding per element).
void scale(float* x, int64_t n, float s);

}  // namespace medtune::ops
