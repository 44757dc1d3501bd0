#include "model/lora_linear.h"

#include <cblas.h>

#include <vector>

namespace medtune::model {

namespace {
// splitmix64: a counter-based generator, so element i's draw needs no state.
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// With dropout, the LoRA input is xd (filled here); without, x itself.
const float* lora_input(const float* x, float* xd, int64_t N, int64_t in, const DropoutSite& d) {
  if (d.p <= 0) return x;
  lora_dropout(xd, x, N, in, d);
  return xd;
}
}  // namespace

void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const DropoutSite& d) {
  const uint64_t base = mix(d.seed ^ mix(d.site));
  const float keep_scale = 1.0f / (1.0f - d.p);
  // Drop when the top 24 bits, as a fraction of 2^24, fall below p.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(d.p) * 16777216.0);
#pragma omp parallel for schedule(static) if (N * in > 65536)
  for (int64_t i = 0; i < N * in; ++i) {
    const bool drop = (mix(base + static_cast<uint64_t>(i)) >> 40) < threshold;
    xd[i] = drop ? 0.0f : x[i] * keep_scale;
  }
}

void lora_forward_add(float* y, const float* x, const LoraLinear& lora, float s,
                      const DropoutSite& d, float* u, float* xd, int64_t N) {
  const float* xin = lora_input(x, xd, N, lora.in, d);
  std::vector<float> u_local;
  if (u == nullptr) {
    u_local.resize(static_cast<size_t>(N * lora.r));
    u = u_local.data();
  }
  const int M = static_cast<int>(N), R = static_cast<int>(lora.r);
  const int IN = static_cast<int>(lora.in), OUT = static_cast<int>(lora.out);
  // u (N, r) = xin (N, in) . A^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, R, IN, 1.0f, xin, IN, lora.A.data(), IN,
              0.0f, u, R);
  // y (N, out) += s * u (N, r) . B^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, OUT, R, s, u, R, lora.B.data(), R, 1.0f,
              y, OUT);
}

void project_forward(float* y, const float* x, const ops::StoredMatrix& W, const float* bias,
                     const LoraLinear* lora, float s, const DropoutSite& d, float* u, float* xd,
                     int64_t N) {
  ops::linear_forward(y, x, W, bias, N);
  if (lora != nullptr && lora->enabled()) lora_forward_add(y, x, *lora, s, d, u, xd, N);
}

void project_backward(float* dx, const float* dy_base, const float* dy, const float* x,
                      const ops::StoredMatrix& W, LoraLinear* lora, float s,
                      const DropoutSite& d, const float* u, float* du, float* xd, int64_t N,
                      bool accumulate) {
  ops::linear_backward_input(dx, dy_base, W, N, accumulate);
  if (lora == nullptr || !lora->enabled()) return;
  const int M = static_cast<int>(N), R = static_cast<int>(lora->r);
  const int IN = static_cast<int>(lora->in), OUT = static_cast<int>(lora->out);
  // dB (out, r) += s * dy^T (out, N) . u (N, r)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, R, M, s, dy, OUT, u, R, 1.0f,
              lora->dB.data(), R);
  // du (N, r) = s * dy (N, out) . B (out, r)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, R, OUT, s, dy, OUT, lora->B.data(), R,
              0.0f, du, R);
  // dA (r, in) += du^T (r, N) . d(x) (N, in)
  const float* xin = lora_input(x, xd, N, lora->in, d);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, IN, M, 1.0f, du, R, xin, IN, 1.0f,
              lora->dA.data(), IN);
  if (d.p <= 0) {
    // dx (N, in) += du (N, r) . A (r, in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IN, R, 1.0f, du, R, lora->A.data(),
                IN, 1.0f, dx, IN);
  } else {
    // Through the dropout: d(x) = mask * x / (1-p), so dx += mask / (1-p) * (du A).
    std::vector<float> g(static_cast<size_t>(N * lora->in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IN, R, 1.0f, du, R, lora->A.data(),
                IN, 0.0f, g.data(), IN);
    lora_dropout(g.data(), g.data(), N, lora->in, d);
    for (size_t i = 0; i < g.size(); ++i) dx[i] += g[i];
  }
}

}  // namespace medtune::model
