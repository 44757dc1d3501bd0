#include "model/lora_linear.h"

#include <cstring>
#include <vector>

#include "backend/array.h"

namespace medtune::model {

namespace {

using backend::Trans;

// With dropout, the LoRA input is xd (filled here); without, x itself.
const float* lora_input(backend::Backend& be, const float* x, float* xd, int64_t N, int64_t in,
                        const DropoutSite& d) {
  if (d.p <= 0) return x;
  be.lora_dropout(xd, x, N, in, d);
  return xd;
}

// The backend's resident copy of a host matrix.
const float* resident(backend::Backend& be, const std::vector<float>& m) {
  return static_cast<const float*>(be.resident(m.data(), m.size() * sizeof(float)));
}
// The adapter matrices as `be` reads them: a trainer's device copy (LoraLinear::device_A/B), or
// the resident copy of the host matrix.
const float* dev_A(backend::Backend& be, const LoraLinear& l) { return l.device_A != nullptr ? l.device_A : resident(be, l.A); }
const float* dev_B(backend::Backend& be, const LoraLinear& l) { return l.device_B != nullptr ? l.device_B : resident(be, l.B); }

}  // namespace

void lora_forward_u(backend::Backend& be, const float* x, const LoraLinear& lora,
                    const DropoutSite& d, float* u, float* xd, int64_t N) {
  const float* xin = lora_input(be, x, xd, N, lora.in, d);
  // u (N, r) = xin (N, in) . A^T
  be.gemm(Trans::kNo, Trans::kYes, N, lora.r, lora.in, 1.0f, xin, lora.in, dev_A(be, lora), lora.in,
          0.0f, u, lora.r);
}

void lora_forward_add(backend::Backend& be, float* y, const float* x, const LoraLinear& lora,
                      float s, const DropoutSite& d, float* u, float* xd, int64_t N) {
  backend::Array<float> u_local;
  if (u == nullptr) {
    u_local.fit(be, static_cast<size_t>(N * lora.r));
    u = u_local.data();
  }
  lora_forward_u(be, x, lora, d, u, xd, N);
  const int64_t R = lora.r, OUT = lora.out;
  // y (N, out) += s * u (N, r) . B^T
  be.gemm(Trans::kNo, Trans::kYes, N, OUT, R, s, u, R, dev_B(be, lora), R, 1.0f, y, OUT);
}

void project_forward(backend::Backend& be, float* y, const float* x, const ops::StoredMatrix& W, const float* bias,
                     const LoraLinear* lora, float s, const DropoutSite& d, float* u, float* xd,
                     int64_t N) {
  be.linear_forward(y, x, W, bias, N);
  if (lora != nullptr && lora->enabled()) lora_forward_add(be, y, x, *lora, s, d, u, xd, N);
}

void project_backward(backend::Backend& be, float* dx, const float* dy_base, const float* dy, const float* x,
                      const ops::StoredMatrix& W, const LoraLinear* lora, const LoraGrad& grad, float s,
                      const DropoutSite& d, const float* u, float* du, float* xd, int64_t N,
                      bool accumulate) {
  be.linear_backward_input(dx, dy_base, W, N, accumulate);
  if (lora != nullptr && lora->enabled()) lora_backward(be, dx, dy, x, *lora, grad, s, d, u, du, xd, N);
}

void lora_backward(backend::Backend& be, float* dx, const float* dy, const float* x, const LoraLinear& lora,
                   const LoraGrad& grad, float s, const DropoutSite& d, const float* u, float* du,
                   float* xd, int64_t N) {
  const int64_t R = lora.r, IN = lora.in, OUT = lora.out;
  // dB (out, r) += s * dy^T (out, N) . u (N, r)
  be.gemm(Trans::kYes, Trans::kNo, OUT, R, N, s, dy, OUT, u, R, 1.0f, grad.dB, R);
  // du (N, r) = s * dy (N, out) . B (out, r)
  be.gemm(Trans::kNo, Trans::kNo, N, R, OUT, s, dy, OUT, dev_B(be, lora), R, 0.0f, du, R);
  // dA (r, in) += du^T (r, N) . d(x) (N, in)
  const float* xin = lora_input(be, x, xd, N, lora.in, d);
  be.gemm(Trans::kYes, Trans::kNo, R, IN, N, 1.0f, du, R, xin, IN, 1.0f, grad.dA, IN);
  if (dx == nullptr) return;
  if (d.p <= 0) {
    // dx (N, in) += du (N, r) . A (r, in)
    be.gemm(Trans::kNo, Trans::kNo, N, IN, R, 1.0f, du, R, dev_A(be, lora), IN, 1.0f, dx, IN);
  } else {
    // Through the dropout: d(x) = mask * x / (1-p), so dx += mask / (1-p) * (du A).
    backend::Array<float> g(be, static_cast<size_t>(N * lora.in));  // (N, in)
    be.gemm(Trans::kNo, Trans::kNo, N, IN, R, 1.0f, du, R, dev_A(be, lora), IN, 0.0f, g.data(), IN);
    be.lora_dropout(g.data(), g.data(), N, lora.in, d);
    be.add_inplace(dx, g.data(), N * lora.in);
  }
}

namespace {
// The calling thread's buffers for stacked groups on the backend last used, grown as needed,
// garbage on entry. Small: (sum r, in) and (N, sum r) floats, ~0.2 MB at 1024 tokens and three
// rank-16 projections.
struct GroupScratch {
  backend::Array<float> a;   // (sum r, in) [A_1; A_2; ...]
  backend::Array<float> u;   // (N, sum r)  u (forward) or du (backward) of every member
  backend::Array<float> da;  // (sum r, in) stacked dA of this call
};
float* grow(backend::Backend& be, backend::Array<float>& v, int64_t n) {
  if (v.backend() != &be || v.size() < static_cast<size_t>(n)) v.fit(be, static_cast<size_t>(n));
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
const float* stack_a(backend::Backend& be, const G* g, int n, int64_t rs, int64_t in) {
  float* a = grow(be, group_scratch().a, rs * in);
  for (int i = 0; i < n; ++i) {
    const LoraLinear& l = *g[i].lora;
    be.copy(a, dev_A(be, l), l.A.size() * sizeof(float));
    a += l.A.size();
  }
  return group_scratch().a.data();
}
}  // namespace

void lora_group_forward(backend::Backend& be, const LoraGroupForward* g, int n, const float* x, float s, int64_t N) {
  const int64_t in = g[0].lora->in, rs = total_rank(g, n);
  const float* a = stack_a(be, g, n, rs, in);
  float* u = grow(be, group_scratch().u, N * rs);  // (N, sum r)
  // u (N, sum r) = x (N, in) . [A_1; A_2; ...]^T
  be.gemm(Trans::kNo, Trans::kYes, N, rs, in, 1.0f, x, in, a, in, 0.0f, u, rs);
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    const LoraLinear& l = *g[i].lora;
    // y_i (N, out) += s * u[:, off : off + r] (N, r) . B_i^T
    be.gemm(Trans::kNo, Trans::kYes, N, l.out, l.r, s, u + off, rs, dev_B(be, l), l.r, 1.0f, g[i].y, l.out);
    if (g[i].u != nullptr) be.copy_rows(g[i].u, l.r, u + off, rs, N, l.r);
    off += l.r;
  }
}

void lora_group_backward(backend::Backend& be, float* dx, const LoraGroupBackward* g, int n, const float* x, float s,
                         int64_t N) {
  const int64_t in = g[0].lora->in, rs = total_rank(g, n);
  float* du = grow(be, group_scratch().u, N * rs);  // (N, sum r)
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    const LoraLinear& l = *g[i].lora;
    // dB_i (out, r) += s * dy_i^T (out, N) . u_i (N, r)
    be.gemm(Trans::kYes, Trans::kNo, l.out, l.r, N, s, g[i].dy, l.out, g[i].u, l.r, 1.0f, g[i].grad.dB, l.r);
    // du[:, off : off + r] (N, r) = s * dy_i (N, out) . B_i (out, r)
    be.gemm(Trans::kNo, Trans::kNo, N, l.r, l.out, s, g[i].dy, l.out, dev_B(be, l), l.r, 0.0f, du + off, rs);
    off += l.r;
  }
  // [dA_1; dA_2; ...] (sum r, in) = du^T (sum r, N) . x (N, in), then added into each dA_i.
  float* da = grow(be, group_scratch().da, rs * in);
  be.gemm(Trans::kYes, Trans::kNo, rs, in, N, 1.0f, du, rs, x, in, 0.0f, da, in);
  for (int i = 0; i < n; ++i) {
    const int64_t size = g[i].lora->r * in;
    be.add_inplace(g[i].grad.dA, da, size);
    da += size;
  }
  if (dx == nullptr) return;
  // dx (N, in) += du (N, sum r) . [A_1; A_2; ...] (sum r, in)
  const float* a = stack_a(be, g, n, rs, in);
  be.gemm(Trans::kNo, Trans::kNo, N, in, rs, 1.0f, du, rs, a, in, 1.0f, dx, in);
}

}  // namespace medtune::model
