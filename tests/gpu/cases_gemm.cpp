// The linear layers' GEMMs through cuBLAS / hipBLAS (gpu/blas.h) against a plain loop in double.
//
// Tolerance: componentwise. Each output is a sum of K products (K = cols for the forward, rows
// for dX, N for dW) plus, when accumulating, the old value. The BLAS picks its own order (tiles,
// split-K, FMA or not), and for ANY order a K-term fp32 sum of rounded or fused products errs by
// at most (K + 1)·u·Σ_k|a_k·b_k| to first order (Higham, Accuracy and Stability, 3.1; the +1 for
// the product's rounding, and + |c0| in the sum when accumulating). The reference rounds once
// (u·|ref|). So |gpu − ref| ≤ 2·((K + 2)·u·(Σ_k|a_k·b_k| + |c0|) + u·|ref|), the 2 for second-order
// terms. DESIGN.md's NMSE ≤ 5e-4 is for bf16 storage; this fp32 bound is about 1e-4 of it at
// K = 4096. TF32 tensor cores (10-bit mantissa, u = 2^-11) would break it by orders of magnitude:
// the check also catches a math mode that silently drops to TF32.
// alpha (the BLAS's α, output = α·product (+ c0)): the reference is α·Σ + c0 in double, and each
// product's magnitude in the bound is |α·a_k·b_k|. α = 0.375 = 3/8 is not a power of two, so the
// GPU adds at most one rounding, of α·(the sum), bounded by u·|α|·Σ_k|a_k·b_k| to first order: one
// more u of the same magnitudes, (K + 2)·u in all, which is the bound's K + 2 (it had one to
// spare), still doubled for second-order terms. So the bound's derivation is unchanged.
#include <cmath>
#include <memory>

#include "core/half.h"
#include "gpu/blas.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

enum class Shape { Forward, BackwardInput, BackwardWeight };

const char* shape_name(Shape s) {
  switch (s) {
    case Shape::Forward: return "gemm/linear_forward";
    case Shape::BackwardInput: return "gemm/linear_backward_input";
    case Shape::BackwardWeight: return "gemm/linear_backward_weight";
  }
  return "?";
}

// C (M, Ncol) (+)= Σ_k A(i, k)·B(k, j) with element accessors; returns the bound per element.
template <typename AF, typename BF>
void reference(std::vector<float>& c, std::vector<double>& bound, int64_t M, int64_t Ncol, int64_t K,
               AF a, BF b, bool accumulate, double alpha) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < Ncol; ++j) {
      const size_t o = static_cast<size_t>(i * Ncol + j);
      double acc = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = static_cast<double>(a(i, k)) * static_cast<double>(b(k, j));
        acc += x;
        mag += std::fabs(x);
      }
      acc *= alpha;
      mag *= std::fabs(alpha);
      if (accumulate) {
        acc += static_cast<double>(c[o]);
        mag += std::fabs(static_cast<double>(c[o]));
      }
      c[o] = static_cast<float>(acc);
      bound[o] = 2 * (static_cast<double>(K + 2) * kU * mag + kU * std::fabs(acc));
    }
}

void add_case(Registry& r, Shape which, int64_t N, int64_t rows, int64_t cols, bool accumulate, bool quick,
              float alpha = 1.0f) {
  const std::string name = std::string(shape_name(which)) + "/" +
                           shape({{"N", N}, {"rows", rows}, {"cols", cols}}) + (accumulate ? ",accumulate" : "") +
                           (alpha != 1.0f ? ",alpha=" + std::to_string(alpha).substr(0, 5) : "");
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    const double alpha_d = static_cast<double>(alpha);
    const std::vector<float> x = random_normals(static_cast<size_t>(N * cols), 41);   // (N, cols)
    const std::vector<float> w = random_normals(static_cast<size_t>(rows * cols), 42, 0.05f);  // (rows, cols)
    const std::vector<float> dy = random_normals(static_cast<size_t>(N * rows), 43);  // (N, rows)
    gpu::Blas blas(s);
    std::vector<float> ref;
    std::vector<double> bound;
    GuardedDevice<float> d_x(x, s), d_w(w, s), d_dy(dy, s);
    std::unique_ptr<GuardedDevice<float>> out;
    const auto start = [&](size_t n, uint64_t seed) {
      // Accumulating: start from random values; overwriting: from NaN bytes (never to be read).
      ref = accumulate ? random_normals(n, seed) : std::vector<float>(n, 0.0f);
      bound.assign(n, 0.0);
      out = accumulate ? std::make_unique<GuardedDevice<float>>(ref, s)
                       : std::make_unique<GuardedDevice<float>>(n, s);
    };
    switch (which) {
      case Shape::Forward:  // y (N, rows) = x·Wᵀ
        start(static_cast<size_t>(N * rows), 44);
        gpu::linear_forward(blas, out->data(), d_x.data(), d_w.data(),
                            N, rows, cols, accumulate, alpha);
        reference(ref, bound, N, rows, cols, [&](int64_t i, int64_t k) { return x[static_cast<size_t>(i * cols + k)]; },
                  [&](int64_t k, int64_t j) { return w[static_cast<size_t>(j * cols + k)]; },
                  accumulate, alpha_d);
        break;
      case Shape::BackwardInput:  // dx (N, cols) = dy·W
        start(static_cast<size_t>(N * cols), 45);
        gpu::linear_backward_input(blas, out->data(), d_dy.data(), d_w.data(),
                                   N, rows, cols, accumulate, alpha);
        reference(ref, bound, N, cols, rows, [&](int64_t i, int64_t k) { return dy[static_cast<size_t>(i * rows + k)]; },
                  [&](int64_t k, int64_t j) { return w[static_cast<size_t>(k * cols + j)]; },
                  accumulate, alpha_d);
        break;
      case Shape::BackwardWeight:  // dW (rows, cols) = dyᵀ·x
        start(static_cast<size_t>(rows * cols), 46);
        gpu::linear_backward_weight(blas, out->data(), d_dy.data(), d_x.data(),
                                    N, rows, cols, accumulate, alpha);
        reference(ref, bound, rows, cols, N, [&](int64_t i, int64_t k) { return dy[static_cast<size_t>(k * rows + i)]; },
                  [&](int64_t k, int64_t j) { return x[static_cast<size_t>(k * cols + j)]; },
                  accumulate, alpha_d);
        break;
    }
    const std::vector<float> got = out->download(s);
    c.guards("C", *out, s);
    c.nan_agreement("C", got, ref);
    c.within("C", got, ref, bound);
  });
}

// The checks of a strided C (M, ldc) whose first N columns hold the product: the product against
// `ref` (M, N) within `bound`, and the padding columns bit-identical to their starting values c0.
void check_padded_c(Checks& c, const GuardedDevice<float>& d_c, const gpu::Stream& s, const std::vector<float>& c0,
                    const std::vector<float>& ref, const std::vector<double>& bound, int64_t M, int64_t N,
                    int64_t ldc) {
  const std::vector<float> all = d_c.download(s);
  std::vector<float> got(ref.size()), pad_got, pad_want;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const float v = all[static_cast<size_t>(i * ldc + j)];
      if (j < N) {
        got[static_cast<size_t>(i * N + j)] = v;
      } else {
        pad_got.push_back(v);
        pad_want.push_back(c0[static_cast<size_t>(i * ldc + j)]);
      }
    }
  c.guards("C", d_c, s);
  c.nan_agreement("C", got, ref);
  c.within("C", got, ref, bound);
  c.bit_exact("C padding (untouched)", pad_got, pad_want);
}

// gpu::gemm, the general row-major form: op(A), op(B) by trans flags, strided operands (leading
// dimensions wider than the columns used, as a LoRA's slice of a stacked product), any beta. Same
// tolerance as above with c0 = beta·C (beta = 1 or 0 here, so no extra rounding).
void add_general_case(Registry& r, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad,
                      float alpha, float beta, bool quick) {
  const std::string name = "gemm/general/" + shape({{"M", M}, {"N", N}, {"K", K}, {"pad", pad}}) +
                           (ta ? ",At" : "") + (tb ? ",Bt" : "") + ",beta=" + std::to_string(beta).substr(0, 3);
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    const std::vector<float> a = random_normals(static_cast<size_t>(a_rows * lda), 51);
    const std::vector<float> b = random_normals(static_cast<size_t>(b_rows * ldb), 52);
    std::vector<float> c0 = random_normals(static_cast<size_t>(M * ldc), 53);  // padding kept as is
    const auto A = [&](int64_t i, int64_t k) { return ta ? a[static_cast<size_t>(k * lda + i)] : a[static_cast<size_t>(i * lda + k)]; };
    const auto B = [&](int64_t k, int64_t j) { return tb ? b[static_cast<size_t>(j * ldb + k)] : b[static_cast<size_t>(k * ldb + j)]; };
    const bool accumulate = beta != 0.0f;
    // The reference on the dense (M, N) part; the padding columns must come back untouched.
    std::vector<float> ref(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) ref[static_cast<size_t>(i * N + j)] = c0[static_cast<size_t>(i * ldc + j)];
    std::vector<double> bound(ref.size());
    reference(ref, bound, M, N, K, A, B, accumulate, static_cast<double>(alpha));
    gpu::Blas blas(s);
    GuardedDevice<float> d_a(a, s), d_b(b, s), d_c(c0, s);
    gpu::gemm(blas, ta, tb, M, N, K, alpha, d_a.data(), lda, d_b.data(), ldb, beta, d_c.data(), ldc);
    check_padded_c(c, d_c, s, c0, ref, bound, M, N, ldc);
  });
}

// gpu::gemm_bf16: bf16 inputs (random values rounded to bf16 on the host, so both sides see the same
// inputs), fp32 output. The product of two bf16 values (8-bit significands) is exact in fp32, so
// the reference is the double sum of the exact products, and the GPU's only error is its fp32
// accumulation: the fp32 bound above holds. Tensor cores are reported to align and truncate
// (round toward zero) in their fp32 accumulators rather than round to nearest: up to 2u per
// addition instead of u, so the bound is doubled for this case.
void add_bf16_case(Registry& r, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad, float beta,
                   bool quick) {
  const std::string name = "gemm/bf16/" + shape({{"M", M}, {"N", N}, {"K", K}, {"pad", pad}}) + (ta ? ",At" : "") +
                           (tb ? ",Bt" : "") + ",beta=" + std::to_string(beta).substr(0, 3);
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    const auto to_bf16 = [](const std::vector<float>& v) {
      std::vector<uint16_t> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
      return out;
    };
    const std::vector<uint16_t> a = to_bf16(random_normals(static_cast<size_t>(a_rows * lda), 61));
    const std::vector<uint16_t> b = to_bf16(random_normals(static_cast<size_t>(b_rows * ldb), 62));
    std::vector<float> c0 = random_normals(static_cast<size_t>(M * ldc), 63);
    const auto A = [&](int64_t i, int64_t k) {
      return bf16_to_f32(ta ? a[static_cast<size_t>(k * lda + i)] : a[static_cast<size_t>(i * lda + k)]);
    };
    const auto B = [&](int64_t k, int64_t j) {
      return bf16_to_f32(tb ? b[static_cast<size_t>(j * ldb + k)] : b[static_cast<size_t>(k * ldb + j)]);
    };
    std::vector<float> ref(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) ref[static_cast<size_t>(i * N + j)] = c0[static_cast<size_t>(i * ldc + j)];
    std::vector<double> bound(ref.size());
    reference(ref, bound, M, N, K, A, B, beta != 0.0f, 1.0);
    for (double& x : bound) x *= 2;  // truncating accumulators (see above)
    gpu::Blas blas(s);
    GuardedDevice<uint16_t> d_a(a, s), d_b(b, s);
    GuardedDevice<float> d_c(c0, s);
    gpu::gemm_bf16(blas, ta, tb, M, N, K, 1.0f, d_a.data(), lda, d_b.data(), ldb, beta, d_c.data(), ldc);
    check_padded_c(c, d_c, s, c0, ref, bound, M, N, ldc);
  });
}

}  // namespace

void register_gemm_cases(Registry& r) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      add_bf16_case(r, ta, tb, 7, 5, 3, 0, 0.0f, true);
      add_bf16_case(r, ta, tb, 33, 17, 65, 3, 1.0f, true);
    }
  // The backend's two bf16 shapes at Llama-2-7B widths: q_proj forward (x . W^T) and its input
  // gradient (dy . W).
  add_bf16_case(r, false, true, 64, 4096, 4096, 0, 0.0f, false);
  add_bf16_case(r, false, false, 64, 4096, 4096, 0, 0.0f, false);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      add_general_case(r, ta, tb, 7, 5, 3, 0, 1.0f, 0.0f, true);
      add_general_case(r, ta, tb, 33, 17, 65, 3, 0.375f, 1.0f, true);  // strided, accumulating
      add_general_case(r, ta, tb, 257, 48, 576, 16, 1.0f, 0.0f, false);  // a LoRA slice (r = 16 of 48)
    }
  // Empty sums (K = 0): the output becomes zeros, or stays as it was when accumulating.
  add_case(r, Shape::Forward, 4, 6, 0, false, true);
  add_case(r, Shape::BackwardWeight, 0, 6, 5, true, true);
  for (Shape which : {Shape::Forward, Shape::BackwardInput, Shape::BackwardWeight}) {
    add_case(r, which, 1, 1, 1, false, true);
    add_case(r, which, 7, 33, 65, false, true);   // odd: no dimension a multiple of a tile
    add_case(r, which, 13, 17, 100, true, true);  // accumulate (β = 1)
    // α != 1, overwriting and accumulating (see the top of the file for the tolerance)
    add_case(r, which, 7, 33, 65, false, true, 0.375f);
    add_case(r, which, 13, 17, 100, true, true, 0.375f);
    // Llama-3-8B widths: q_proj (4096 -> 4096) and the MLP's down_proj (14336 -> 4096); token
    // counts kept small because the double reference costs N·rows·cols on the host.
    add_case(r, which, 128, 4096, 4096, false, false);
    add_case(r, which, 64, 4096, 14336, which == Shape::BackwardWeight, false);
  }
}

}  // namespace medtune::gpu_test
