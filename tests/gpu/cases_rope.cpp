// RoPE forward and backward against ops::ref (same pairing: element i with i + HD/2).
//
// Tolerance: each output is a·c ∓ b·s of one pair (a, b). The reference forward rounds both
// products and the sum (≤ 1.5u·(|a·c| + |b·s|) from exact), the reference backward computes in
// double and rounds once; the GPU may contract one product into an FMA (≤ 1.5u·(...) as well). So
// |Δ| ≤ 3u·(|a·c| + |b·s|) ≤ 3u·√2·|(a, b)| per element (|c|, |s| ≤ 1, c² + s² = 1 for real
// angles); summed over the pair's two elements, Σ Δ² ≤ 36u²·|(a, b)|², while the pair's
// reference energy is |(a, b)|² (a rotation keeps the norm): NMSE ≤ 36u² = (6u)². Checked
// against (9u)² for second-order terms.
#include <cmath>

#include "gpu/ops.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

// HF's angles: position n times inv_freq_i = theta^(-2i/HD).
void angles(int64_t N, int64_t HD, std::vector<float>& cos, std::vector<float>& sin) {
  const int64_t half = HD / 2;
  cos.resize(static_cast<size_t>(N * half));
  sin.resize(cos.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < half; ++i) {
      const double inv = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(HD));
      const double a = static_cast<double>(n * 37 % 4096) * inv;  // scattered positions
      cos[static_cast<size_t>(n * half + i)] = static_cast<float>(std::cos(a));
      sin[static_cast<size_t>(n * half + i)] = static_cast<float>(std::sin(a));
    }
}

void add_case(Registry& r, int64_t N, int64_t H, int64_t HD, bool quick) {
  const std::string dims = shape({{"N", N}, {"H", H}, {"HD", HD}});
  const double tol = std::pow(9 * kU, 2);
  r.add("rope_forward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> cos, sin;
    angles(N, HD, cos, sin);
    const std::vector<float> x = random_normals(static_cast<size_t>(N * H * HD), 31);
    std::vector<float> ref = x;
    ops::ref::rope_forward(ref.data(), cos.data(), sin.data(), N, H, HD);
    GuardedDevice<float> d_x(x, s), d_cos(cos, s), d_sin(sin, s);
    gpu::rope_forward(d_x.data(), d_cos.data(), d_sin.data(), N, H, HD, s);
    const std::vector<float> out = d_x.download(s);
    c.guards("x", d_x, s);
    c.nan_agreement("x", out, ref);
    c.nmse("x", out, ref, tol);
  });
  r.add("rope_backward/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<float> cos, sin;
    angles(N, HD, cos, sin);
    const std::vector<float> dy = random_normals(static_cast<size_t>(N * H * HD), 32);
    std::vector<float> ref = dy;
    ops::ref::rope_backward<float>(ref.data(), cos.data(), sin.data(), N, H, HD);
    GuardedDevice<float> d_x(dy, s), d_cos(cos, s), d_sin(sin, s);
    gpu::rope_backward(d_x.data(), d_cos.data(), d_sin.data(), N, H, HD, s);
    const std::vector<float> out = d_x.download(s);
    c.guards("dx", d_x, s);
    c.nan_agreement("dx", out, ref);
    c.nmse("dx", out, ref, tol);
    // backward ∘ forward is the identity up to rounding: catches a pairing that is
    // self-consistent between the GPU kernels but differs from the CPU's.
    gpu::rope_forward(d_x.data(), d_cos.data(), d_sin.data(), N, H, HD, s);
    c.nmse("forward(backward(dy)) == dy", d_x.download(s), dy, tol);
  });
}

}  // namespace

void register_rope_cases(Registry& r) {
  add_case(r, 1, 1, 2, true);
  add_case(r, 7, 3, 10, true);
  add_case(r, 33, 8, 64, true);
  add_case(r, 512, 32, 128, false);  // Llama-2-7B: 32 heads of 128
  add_case(r, 1024, 8, 128, false);  // Llama-3-8B keys: 8 kv heads
}

}  // namespace medtune::gpu_test
