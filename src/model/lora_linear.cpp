#include "model/lora_linear.h"

#include <cblas.h>

#include <cstring>
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
  for (int64_t n = 0; n < N; ++n) {
    // Element (row, j) of the whole batch draws from counter row * in + j.
    const uint64_t first = base + static_cast<uint64_t>((d.row0 + (d.rows != nullptr ? d.rows[n] : n)) * in);
    for (int64_t j = 0; j < in; ++j) {
      const int64_t i = n * in + j;
      const bool drop = (mix(first + static_cast<uint64_t>(j)) >> 40) < threshold;
      xd[i] = drop ? 0.0f : x[i] * keep_scale;
    }
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
  if (lora != nullptr && lora->enabled()) lora_backward(dx, dy, x, *lora, s, d, u, du, xd, N);
}

void lora_backward(float* dx, const float* dy, const float* x, LoraLinear& lora, float s,
                   const DropoutSite& d, const float* u, float* du, float* xd, int64_t N) {
  const int M = static_cast<int>(N), R = static_cast<int>(lora.r);
  const int IN = static_cast<int>(lora.in), OUT = static_cast<int>(lora.out);
  // dB (out, r) += s * dy^T (out, N) . u (N, r)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, R, M, s, dy, OUT, u, R, 1.0f,
              lora.dB.data(), R);
  // du (N, r) = s * dy (N, out) . B (out, r)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, R, OUT, s, dy, OUT, lora.B.data(), R,
              0.0f, du, R);
  // dA (r, in) += du^T (r, N) . d(x) (N, in)
  const float* xin = lora_input(x, xd, N, lora.in, d);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, IN, M, 1.0f, du, R, xin, IN, 1.0f,
              lora.dA.data(), IN);
  if (dx == nullptr) return;
  if (d.p <= 0) {
    // dx (N, in) += du (N, r) . A (r, in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IN, R, 1.0f, du, R, lora.A.data(),
                IN, 1.0f, dx, IN);
  } else {
    // Through the dropout: d(x) = mask * x / (1-p), so dx += mask / (1-p) * (du A).
    std::vector<float> g(static_cast<size_t>(N * lora.in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IN, R, 1.0f, du, R, lora.A.data(),
                IN, 0.0f, g.data(), IN);
    lora_dropout(g.data(), g.data(), N, lora.in, d);
    for (size_t i = 0; i < g.size(); ++i) dx[i] += g[i];
  }
}

namespace {
// The calling thread's buffers for stacked groups, grown as needed, garbage on entry. Small:
// (sum r, in) and (N, sum r) floats, ~0.2 MB at 1024 tokens and three rank-16 projections.
struct GroupScratch {
  std::vector<float> a;   // (sum r, in) [A_1; A_2; ...]
  std::vector<float> u;   // (N, sum r)  u (forward) or du (backward) of every member
  std::vector<float> da;  // (sum r, in) stacked dA of this call
};
float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) {
    v.clear();  // no copy of the old contents
    v.resize(static_cast<size_t>(n));
  }
  return v.data();
}
GroupScratch& group_scratch() {
  thread_local GroupScratch s;
  return s;
}

// Sum of the members' ranks.
template <typename G>
int64_t total_rank(const G* g, int n) {
  int64_t rs = 0;
  for (int i = 0; i < n; ++i) rs += g[i].lora->r;
  return rs;
}

// Copies the members' A matrices into one (sum r, in) matrix: copying 48 x 576 floats per call
// is cheap next to the GEMMs, and leaves LoraLinear (checkpoints, export) as it is.
template <typename G>
const float* stack_a(const G* g, int n, int64_t rs, int64_t in) {
  float* a = grow(group_scratch().a, rs * in);
  for (int i = 0; i < n; ++i) {
    std::memcpy(a, g[i].lora->A.data(), g[i].lora->A.size() * sizeof(float));
    a += g[i].lora->A.size();
  }
  return group_scratch().a.data();
}
}  // namespace

void lora_group_forward(const LoraGroupForward* g, int n, const float* x, float s, int64_t N) {
  const int64_t in = g[0].lora->in, rs = total_rank(g, n);
  const float* a = stack_a(g, n, rs, in);
  float* u = grow(group_scratch().u, N * rs);  // (N, sum r)
  const int M = static_cast<int>(N), RS = static_cast<int>(rs), IN = static_cast<int>(in);
  // u (N, sum r) = x (N, in) . [A_1; A_2; ...]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, RS, IN, 1.0f, x, IN, a, IN, 0.0f, u, RS);
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    const LoraLinear& l = *g[i].lora;
    const int R = static_cast<int>(l.r), OUT = static_cast<int>(l.out);
    // y_i (N, out) += s * u[:, off : off + r] (N, r) . B_i^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, OUT, R, s, u + off, RS, l.B.data(), R,
                1.0f, g[i].y, OUT);
    if (g[i].u != nullptr)
      for (int64_t row = 0; row < N; ++row)
        std::memcpy(g[i].u + row * l.r, u + row * rs + off, static_cast<size_t>(l.r) * sizeof(float));
    off += l.r;
  }
}

void lora_group_backward(float* dx, const LoraGroupBackward* g, int n, const float* x, float s,
                         int64_t N) {
  const int64_t in = g[0].lora->in, rs = total_rank(g, n);
  float* du = grow(group_scratch().u, N * rs);  // (N, sum r)
  const int M = static_cast<int>(N), RS = static_cast<int>(rs), IN = static_cast<int>(in);
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    LoraLinear& l = *g[i].lora;
    const int R = static_cast<int>(l.r), OUT = static_cast<int>(l.out);
    // dB_i (out, r) += s * dy_i^T (out, N) . u_i (N, r)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, R, M, s, g[i].dy, OUT, g[i].u, R, 1.0f,
                l.dB.data(), R);
    // du[:, off : off + r] (N, r) = s * dy_i (N, out) . B_i (out, r)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, R, OUT, s, g[i].dy, OUT, l.B.data(), R,
                0.0f, du + off, RS);
    off += l.r;
  }
  // [dA_1; dA_2; ...] (sum r, in) = du^T (sum r, N) . x (N, in), then added into each dA_i.
  float* da = grow(group_scratch().da, rs * in);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, RS, IN, M, 1.0f, du, RS, x, IN, 0.0f, da, IN);
  for (int i = 0; i < n; ++i) {
    std::vector<float>& dA = g[i].lora->dA;
    for (size_t j = 0; j < dA.size(); ++j) dA[j] += da[j];
    da += dA.size();
  }
  if (dx == nullptr) return;
  // dx (N, in) += du (N, sum r) . [A_1; A_2; ...] (sum r, in)
  const float* a = stack_a(g, n, rs, in);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IN, RS, 1.0f, du, RS, a, IN, 1.0f, dx, IN);
}

}  // namespace medtune::model
