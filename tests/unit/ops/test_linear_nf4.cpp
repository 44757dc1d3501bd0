// Linear layers over an NF4 (bitsandbytes 4-bit) weight: forward (both the fused decode path and
// the panel + SGEMM path) and the backward to the input, against a double-precision product with
// the weight as bitsandbytes dequantizes it (nf4::dequantize_scalar on bnb's flat layout).
// Tolerance: kReductionNmse = 1e-10, as for every other stored dtype in test_ops.cpp (fp32
// accumulation over K <= 4096 terms: relative error ~ sqrt(K) * 2^-24, NMSE ~ 2e-11).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/nf4.h"
#include "ops/linear.h"
#include "support/buffers.h"

namespace medtune {
namespace {

using testing::Guarded;
using testing::nmse;
using testing::random_vector;

constexpr double kReductionNmse = 1e-10;

struct Nf4Weight {
  int64_t R, K;
  std::vector<float> deq;        // (R, K): what bitsandbytes' dequantize_4bit returns
  std::vector<uint8_t> blocks;   // DType::NF4 rows
  ops::StoredMatrix m() const { return {DType::NF4, R, K, blocks.data()}; }
};

Nf4Weight make_weight(int64_t R, int64_t K, uint32_t seed) {
  Nf4Weight w{R, K, {}, {}};
  const auto wf = random_vector(static_cast<size_t>(R * K), seed);
  std::vector<uint8_t> packed(static_cast<size_t>(R * K / 2));
  std::vector<float> absmax(static_cast<size_t>(R * K / nf4::kBlock));
  nf4::quantize(wf.data(), R * K, packed.data(), absmax.data());
  // through double quantization, as QLoRA stores it
  const nf4::NestedAbsmax nested = nf4::quantize_absmax(absmax.data(), static_cast<int64_t>(absmax.size()));
  nf4::dequantize_absmax(nested, absmax.data());
  w.deq.resize(static_cast<size_t>(R * K));
  nf4::dequantize_scalar(packed.data(), absmax.data(), w.deq.data(), R * K);
  w.blocks = nf4::row_blocks(packed.data(), absmax.data(), R, K);
  return w;
}

// y (N, R) = x (N, K) . W^T in double
std::vector<float> matmul_t(const std::vector<float>& x, const std::vector<float>& w, int64_t N, int64_t R, int64_t K) {
  std::vector<float> y(static_cast<size_t>(N * R));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < R; ++r) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(x[static_cast<size_t>(n * K + k)]) * static_cast<double>(w[static_cast<size_t>(r * K + k)]);
      y[static_cast<size_t>(n * R + r)] = static_cast<float>(acc);
    }
  return y;
}

TEST(LinearNf4, DequantizedPanelsAreBitsandbytesValues) {
  const Nf4Weight w = make_weight(70, 192, 21);
  std::vector<float> panel(static_cast<size_t>(70 * 192));
  ops::dequantize_rows(panel.data(), w.m(), 0, 70);
  EXPECT_EQ(0, std::memcmp(panel.data(), w.deq.data(), panel.size() * 4));
}

TEST(LinearNf4, ForwardBothPathsMatchReference) {
  // N <= 4: fused dequantize-and-dot; N > 4: 64-row panels + SGEMM; 129 rows: a partial panel.
  const int64_t R = 129, K = 576;
  const Nf4Weight w = make_weight(R, K, 22);
  for (int64_t N : {1, 3, 17}) {
    auto x = random_vector(static_cast<size_t>(N * K), 23);
    Guarded y(static_cast<size_t>(N * R)), y_ref(y.size());
    ops::linear_forward(y.data(), x.data(), w.m(), nullptr, N);
    ops::ref::linear_forward(y_ref.data(), x.data(), w.m(), nullptr, N);
    const std::vector<float> want = matmul_t(x, w.deq, N, R, K);
    EXPECT_TRUE(y.intact());
    EXPECT_LE(nmse(y.data(), want.data(), want.size()), kReductionNmse) << "N=" << N;
    EXPECT_LE(nmse(y_ref.data(), want.data(), want.size()), kReductionNmse) << "N=" << N;
  }
}

TEST(LinearNf4, BackwardInputMatchesReference) {
  const int64_t R = 130, K = 256, N = 9;
  const Nf4Weight w = make_weight(R, K, 24);
  auto dy = random_vector(static_cast<size_t>(N * R), 25);
  // dx (N, K) = dy (N, R) . W (R, K): as x . (W^T)^T with W^T (K, R)
  std::vector<float> wt(static_cast<size_t>(K * R));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * R + r)] = w.deq[static_cast<size_t>(r * K + k)];
  const std::vector<float> want = matmul_t(dy, wt, N, K, R);
  Guarded dx(static_cast<size_t>(N * K));
  ops::linear_backward_input(dx.data(), dy.data(), w.m(), N);
  EXPECT_TRUE(dx.intact());
  EXPECT_LE(nmse(dx.data(), want.data(), want.size()), kReductionNmse);
  // accumulate: adds onto what is there
  ops::linear_backward_input(dx.data(), dy.data(), w.m(), N, /*accumulate=*/true);
  std::vector<float> twice(want);
  for (float& v : twice) v *= 2.0f;
  EXPECT_LE(nmse(dx.data(), twice.data(), twice.size()), kReductionNmse);
}

}  // namespace
}  // namespace medtune
