// ops::linear_forward_batch_invariant and ops::gemm_batch_invariant: row n of the result is bit
// for bit the same whatever the number of rows (the server's batches, serve/engine.h), and close to
// the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/quant_write.h"
#include "ops/linear.h"
#include "support/buffers.h"

namespace medtune::ops {
namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  return testing::random_normal(static_cast<size_t>(n), seed);
}

// (rows, cols) weights stored in `t`: random floats, or random quantized blocks with finite f16
// scales in ~[2^-12, 2^-4] (as test_linear_int8.cpp) at the dtype's scale offsets.
std::vector<uint8_t> stored(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  if (t == DType::F32 || t == DType::F16) {
    const std::vector<float> f = random_floats(rows * cols, seed);
    return encode_f32(t, f.data(), rows, cols);
  }
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> w(static_cast<size_t>(dtype_row_bytes(t, cols) * rows));
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bb = dtype_block_bytes(t);
  // d (and m or dmin) of each block, in bytes from the block's start (core/quant.cpp's layouts).
  const bool two = t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_1 || t == DType::Q5_K;
  const std::vector<size_t> scale_offsets = two                ? std::vector<size_t>{0, 2}
                                            : t == DType::Q6_K ? std::vector<size_t>{208}
                                            : t == DType::Q2_K ? std::vector<size_t>{80, 82}
                                            : t == DType::Q3_K ? std::vector<size_t>{108}
                                                               : std::vector<size_t>{0};
  for (size_t b = 0; b < w.size() / static_cast<size_t>(bb); ++b)
    for (size_t off : scale_offsets) {
      const uint16_t h = static_cast<uint16_t>(0x1000 + rng() % 0x2000);
      std::memcpy(w.data() + b * static_cast<size_t>(bb) + off, &h, 2);
    }
  return w;
}

TEST(LinearBatchInvariant, EachRowIsTheSameWhateverN) {
  // 100 x 580: a row count that is not a multiple of the 16-row blocks (nor of the 4- and 2-row
  // register tiles); 580 columns leave a tail of 4 after the 8-lane loop (F32 only: quantized rows
  // hold whole blocks, so 576 there, 768 for the 256-element k-quant blocks). Up to 16 tokens the
  // quantized rows are decoded in registers (core/quant.h dot_lanes8), above into a buffer: the
  // comparison of N = 1 with N >= 5 checks that the two give the same bits.
  for (DType t : {DType::F32, DType::F16, DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K,
                  DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q2_K, DType::Q3_K, DType::IQ4_NL,
                  DType::IQ4_XS}) {
    const int64_t R = 100, K = t == DType::F32 ? 580 : dtype_block_elems(t) == 256 ? 768 : 576;
    const std::vector<uint8_t> wb = stored(t, R, K, 1);
    const StoredMatrix w{t, R, K, wb.data()};
    const std::vector<float> bias = random_floats(R, 2);
    const int64_t kMaxN = 70;  // more than one 64-row token block
    const std::vector<float> x = random_floats(kMaxN * K, 3);
    std::vector<float> alone(static_cast<size_t>(kMaxN * R)), want(alone.size());
    for (int64_t n = 0; n < kMaxN; ++n)
      linear_forward_batch_invariant(alone.data() + n * R, x.data() + n * K, w, bias.data(), 1);
    ref::linear_forward(want.data(), x.data(), w, bias.data(), kMaxN);
    // The fixed order sums K/8 products per lane, then 8 lanes in 3 levels: an fp32 dot of depth
    // K/8 + 3, so |error| <= gamma(K/8 + 3) * sum |w_k x_k| with gamma(n) = n u / (1 - n u),
    // u = 2^-24 (Higham, 3.1); the double-precision reference's own error is far below that.
    std::vector<float> wrow(static_cast<size_t>(K));
    const double u = std::ldexp(1.0, -24), depth = static_cast<double>(K / 8 + 3);
    const double gamma = depth * u / (1.0 - depth * u);
    for (int64_t r = 0; r < R; ++r) {
      dequantize_rows(wrow.data(), w, r, r + 1);
      for (int64_t n = 0; n < kMaxN; ++n) {
        double sum_abs = 0;
        for (int64_t k = 0; k < K; ++k) sum_abs += std::fabs(static_cast<double>(wrow[static_cast<size_t>(k)]) * static_cast<double>(x[static_cast<size_t>(n * K + k)]));
        const size_t i = static_cast<size_t>(n * R + r);
        ASSERT_NEAR(alone[i], want[i], gamma * sum_abs) << dtype_name(t) << " row " << r << " token " << n;
      }
    }
    for (int64_t N : {2, 3, 4, 5, 13, 16, 17, 64, 70}) {
      std::vector<float> y(static_cast<size_t>(N * R));
      linear_forward_batch_invariant(y.data(), x.data(), w, bias.data(), N);
      ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), y.size() * sizeof(float))) << dtype_name(t) << " N=" << N;
    }
  }
}

TEST(LinearBatchInvariant, GemmRowsAreTheSameWhateverMInEveryTransposition) {
  const int64_t N = 24, K = 37, kMaxM = 20;
  const std::vector<float> a = random_floats(kMaxM * K, 4), b = random_floats(N * K, 5), c0 = random_floats(kMaxM * N, 6);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        // A is op(A) (M, K) stored as (M, K) or (K, kMaxM); B is op(B) (K, N) stored as (K, N) or (N, K).
        const int64_t lda = ta ? kMaxM : K, ldb = tb ? K : N;
        const auto a_at = [&](int64_t i, int64_t k) { return ta ? a[static_cast<size_t>(k * lda + i)] : a[static_cast<size_t>(i * lda + k)]; };
        const auto b_at = [&](int64_t k, int64_t j) { return tb ? b[static_cast<size_t>(j * ldb + k)] : b[static_cast<size_t>(k * ldb + j)]; };
        std::vector<float> full(c0);
        gemm_batch_invariant(ta, tb, kMaxM, N, K, 0.5f, a.data(), lda, b.data(), ldb, beta, full.data(), N);
        for (int64_t i = 0; i < kMaxM; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(a_at(i, k)) * static_cast<double>(b_at(k, j));
            const double want = 0.5 * acc + static_cast<double>(beta) * static_cast<double>(c0[static_cast<size_t>(i * N + j)]);
            ASSERT_NEAR(full[static_cast<size_t>(i * N + j)], want, 1e-4) << ta << tb << beta << " " << i << "," << j;
          }
        if (ta) continue;  // the rows of a transposed A are not a prefix of it
        for (int64_t M : {1, 3, 5, 17}) {
          std::vector<float> c(c0.begin(), c0.begin() + M * N);
          gemm_batch_invariant(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), N);
          ASSERT_EQ(0, std::memcmp(c.data(), full.data(), c.size() * sizeof(float))) << tb << beta << " M=" << M;
        }
      }
}

}  // namespace
}  // namespace medtune::ops
