// ops::linear_forward_int8: the threaded loop over core/quant_int8's row kernels and
// core/int8_gemm's GEMM, for decode-sized and prompt-sized N, against the scalar reference of the
// kernel the contract (ops/linear.h) names, per (token, row), bit for bit; and the fp32 fallback
// for dtypes without an int8 kernel.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/int8_gemm.h"
#include "core/nf4.h"
#include "core/quant_int8.h"
#include "ops/linear.h"
#include "ops/ops.h"
#include "support/buffers.h"

namespace medtune::ops {
namespace {

// (rows, cols) random blocks of `t` with finite f16 scales in ~[2^-12, 2^-4].
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> w(static_cast<size_t>(dtype_row_bytes(t, cols) * rows));
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bb = dtype_block_bytes(t);
  // Scales: the first f16 of each block, and the second for the types with a min (Q4_1's and
  // Q5_1's m, Q4_K's and Q5_K's dmin); Q6_K's and Q3_K's one f16 is their last two bytes.
  const int scales = int8::has_min(t) ? 2 : 1;
  const int64_t at = t == DType::Q6_K ? 208 : t == DType::Q3_K ? 108 : 0;
  for (size_t b = 0; b < w.size() / static_cast<size_t>(bb); ++b)
    for (int k = 0; k < scales; ++k) {
      const uint16_t h = static_cast<uint16_t>(0x1000 + rng() % 0x2000);
      std::memcpy(w.data() + b * static_cast<size_t>(bb) + at + 2 * k, &h, 2);
    }
  return w;
}

std::vector<float> random_x(int64_t n, uint64_t seed) {
  return testing::random_normal(static_cast<size_t>(n), seed);
}

// (rows, cols) normal weights quantized by bitsandbytes' NF4 into DType::NF4 row blocks (nf4.h).
std::vector<uint8_t> nf4_weights(int64_t rows, int64_t cols, uint64_t seed) {
  const std::vector<float> f = random_x(rows * cols, seed);
  std::vector<uint8_t> packed(f.size() / 2);
  std::vector<float> absmax(f.size() / static_cast<size_t>(nf4::kBlock));
  nf4::quantize(f.data(), static_cast<int64_t>(f.size()), packed.data(), absmax.data());
  return nf4::row_blocks(packed.data(), absmax.data(), rows, cols);
}

// Every element equals the scalar reference (int8::dot_scalar), whichever kernel runs: the GEMM
// from 16 tokens on (where this CPU runs it and the type has one scale per 32), the row kernels
// otherwise and for every N with rows_only. So a token's output is the same bits in both
// modes and at every N.
TEST(LinearInt8, MatchesScalarReferencePerTokenAndRow) {
  constexpr int64_t kRows = 70;  // not a multiple of the row blocks (16, and 48 for the GEMM)
  if (!int8::gemm_available()) std::cout << "[ NOTE ] MEDTUNE_ISA=scalar: the GEMM is not executed\n";
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q3_K,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::NF4})
    for (bool rows_only : {false, true}) {
      ASSERT_TRUE(int8_path(t));
      // SmolLM2's hidden size (18 blocks of 32); the k-quants need whole super-blocks of 256.
      const bool k_quant = dtype_block_elems(t) == 256;
      const int64_t kCols = k_quant ? 768 : 576;
      const std::vector<uint8_t> wb =
          t == DType::NF4 ? nf4_weights(kRows, kCols, 5) : random_weights(t, kRows, kCols, 5);
      const StoredMatrix w{t, kRows, kCols, wb.data()};
      const std::vector<float> bias = random_x(kRows, 6);
      for (int64_t N : {1, 3, 4, 7, 15, 16, 33}) {
        const bool gemm = !rows_only && N >= 16 && int8::gemm_supports(t) && int8::gemm_available();
        const std::vector<float> x = random_x(N * kCols, 7 + static_cast<uint64_t>(N));
        std::vector<float> y(static_cast<size_t>(N * kRows));
        linear_forward_int8(y.data(), x.data(), w, bias.data(), N, rows_only);
        std::vector<int8::BlockQ8> q(static_cast<size_t>(kCols / 32));
        for (int64_t n = 0; n < N; ++n) {
          int8::quantize_activations(x.data() + n * kCols, kCols, q.data());
          for (int64_t r = 0; r < kRows; ++r) {
            const float dot = int8::dot_scalar(t, w.row(r), q.data(), kCols / 32);
            ASSERT_EQ(y[static_cast<size_t>(n * kRows + r)], dot + bias[static_cast<size_t>(r)])
                << dtype_name(t) << " N=" << N << " n=" << n << " r=" << r << (gemm ? " (GEMM)" : " (rows)");
          }
        }
      }
    }
}

TEST(LinearInt8, DtypesWithoutInt8KernelTakeTheFp32Path) {
  constexpr int64_t kRows = 9, kCols = 512, N = 5;
  for (DType t : {DType::BF16, DType::F32}) {
    EXPECT_FALSE(int8_path(t));
    const std::vector<float> f = random_x(kRows * kCols, 8);
    std::vector<uint8_t> wb(f.size() * 4);
    std::memcpy(wb.data(), f.data(), wb.size());
    if (t == DType::BF16)  // the upper halves of the floats: finite bf16 values
      for (size_t i = 0; i < f.size(); ++i) std::memcpy(wb.data() + 2 * i, wb.data() + 4 * i + 2, 2);
    const StoredMatrix w{t, kRows, kCols, wb.data()};
    const std::vector<float> x = random_x(N * kCols, 9);
    std::vector<float> a(N * kRows), b(N * kRows);
    linear_forward_int8(a.data(), x.data(), w, nullptr, N, false);
    linear_forward(b.data(), x.data(), w, nullptr, N);
    EXPECT_EQ(a, b) << dtype_name(t);
  }
}

TEST(LinearInt8, GroupEqualsEachMemberAlone) {
  // q, k and v of a layer in one pass: members of several dtypes and row counts (none a multiple
  // of the 16-row kernel block, so members' blocks meet mid-loop), biases on some.
  constexpr int64_t kCols = 768;  // whole Q6_K super-blocks
  // Three forms of the GEMM's decoded rows: signed, with a min, with Q6_K's scales per 16.
  const DType types[3] = {DType::Q8_0, DType::Q5_1, DType::Q6_K};
  const int64_t rows[3] = {70, 23, 17};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<StoredMatrix> w;
  for (int i = 0; i < 3; ++i) bytes.push_back(random_weights(types[i], rows[i], kCols, 20 + static_cast<uint64_t>(i)));
  for (int i = 0; i < 3; ++i) w.push_back({types[i], rows[i], kCols, bytes[static_cast<size_t>(i)].data()});
  const std::vector<float> bias0 = random_x(rows[0], 30), bias2 = random_x(rows[2], 31);
  const float* biases[3] = {bias0.data(), nullptr, bias2.data()};
  for (int64_t N : {1, 3, 4, 7, 33})
    for (bool rows_only : {false, true}) {
      const std::vector<float> x = random_x(N * kCols, 40 + static_cast<uint64_t>(N));
      std::vector<std::vector<float>> got(3), want(3);
      LinearOut outs[3];
      for (size_t i = 0; i < 3; ++i) {
        got[i].assign(static_cast<size_t>(N * rows[i]), -1.0f);
        want[i].resize(got[i].size());
        linear_forward_int8(want[i].data(), x.data(), w[i], biases[i], N, rows_only);
        outs[i] = {got[i].data(), &w[i], biases[i]};
      }
      linear_forward_int8_group(outs, 3, x.data(), N, rows_only);
      for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(got[i], want[i]) << "member " << i << " N=" << N << " rows_only " << rows_only;
    }
}

// The MLP's fused gate, up and SwiGLU (linear_swiglu_int8) against its steps: the two products
// alone, then swiglu_forward. Every element equal: token counts at the GEMM's threshold and
// above, with a last panel partly filled (below it, no fusion: false, nothing written); rows that
// leave a last block of fewer than 48; types with and without mins and Q6_K's scales per 16; 1 and
// 2 threads.
TEST(LinearInt8, FusedSwigluEqualsItsSteps) {
  constexpr int64_t kCols = 256, kF = 100;  // whole K-quant super-blocks; blocks of 48, 48, 4
  const int threads = omp_get_max_threads();
  for (const DType t : {DType::Q4_1, DType::Q8_0, DType::Q6_K, DType::NF4}) {
    const std::vector<uint8_t> gb =
        t == DType::NF4 ? nf4_weights(kF, kCols, 50) : random_weights(t, kF, kCols, 50);
    const std::vector<uint8_t> ub =
        t == DType::NF4 ? nf4_weights(kF, kCols, 51) : random_weights(t, kF, kCols, 51);
    const StoredMatrix gate{t, kF, kCols, gb.data()}, up{t, kF, kCols, ub.data()};
    for (const int64_t N : {3, 8, 16, 37})
      for (const int n : {1, 2}) {
        omp_set_num_threads(n);
        const std::vector<float> x = random_x(N * kCols, 60 + static_cast<uint64_t>(N));
        std::vector<float> g(static_cast<size_t>(N * kF)), u(g.size()), want(g.size()),
            got(g.size(), -1.0f);
        linear_forward_int8(g.data(), x.data(), gate, nullptr, N);
        linear_forward_int8(u.data(), x.data(), up, nullptr, N);
        swiglu_forward(want.data(), g.data(), u.data(), N * kF);
        const bool gemm = int8::gemm_available() && N >= int8_gemm_min_tokens(t);
        EXPECT_EQ(linear_swiglu_int8(got.data(), x.data(), gate, up, N), gemm)
            << dtype_name(t) << " N=" << N;
        if (gemm)
          EXPECT_EQ(got, want) << dtype_name(t) << " N=" << N << " threads " << n;
        else
          EXPECT_EQ(got, std::vector<float>(got.size(), -1.0f)) << "written without fusing";
      }
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace medtune::ops
