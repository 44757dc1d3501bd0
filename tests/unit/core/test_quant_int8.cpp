// The int8 route (core/quant_int8.h): activation quantization, the kernels of every path this CPU
// can run against the scalar reference (bit for bit), the reference's integer sums against an
// independent double-precision sum, and the result against the exact fp32 dot within the bound
// the activation rounding implies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/int8_gemm.h"
#include "core/nf4.h"
#include "core/quant.h"
#include "core/quant_int8.h"

namespace medtune {
namespace {

using int8::BlockQ8;

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/quant/";
constexpr int64_t kN = 1024;  // elements in each fixture (tests/fixtures/quant/<TYPE>.blocks)
const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1,   DType::Q5_0,
                        DType::Q5_1, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                        DType::Q6_K, DType::NF4,  DType::IQ4_NL, DType::IQ4_XS};
const Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// `rows` weight rows of kN elements: the fixture's blocks (gguf-py-quantized weights and random
// bytes) as row 0, then rows of random bytes with finite f16 scales.
// NF4 has no fixture file: its rows are normal weights quantized by bitsandbytes' NF4 (nf4.h),
// with one all-zero block (absmax 0).
std::vector<uint8_t> nf4_rows(int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> f(static_cast<size_t>(rows * kN));
  for (float& v : f) v = nd(rng);
  std::fill(f.begin(), f.begin() + nf4::kBlock, 0.0f);
  std::vector<uint8_t> packed(f.size() / 2);
  std::vector<float> absmax(f.size() / static_cast<size_t>(nf4::kBlock));
  nf4::quantize(f.data(), static_cast<int64_t>(f.size()), packed.data(), absmax.data());
  return nf4::row_blocks(packed.data(), absmax.data(), rows, kN);
}

std::vector<uint8_t> weight_rows(DType t, int rows, uint64_t seed) {
  if (t == DType::NF4) return nf4_rows(rows, seed);
  std::vector<uint8_t> w = read_bytes(kDir + std::string(dtype_name(t)) + ".blocks");
  const int64_t rb = dtype_row_bytes(t, kN);
  EXPECT_EQ(static_cast<int64_t>(w.size()), rb);
  w.resize(static_cast<size_t>(rb * rows));
  std::mt19937_64 rng(seed);
  const int64_t bb = dtype_block_bytes(t);
  for (int64_t i = rb; i < rb * rows; ++i) w[static_cast<size_t>(i)] = static_cast<uint8_t>(rng());
  for (int64_t b = rb / bb; b < rb * rows / bb; ++b) {
    uint8_t* blk = w.data() + b * bb;
    const uint16_t scale = static_cast<uint16_t>(0x1000 + rng() % 0x2000);  // ~2^-12 .. 2^-4
    // The f16 scale: first in every block but Q6_K's and Q3_K's (their last 2 bytes).
    std::memcpy(blk + (t == DType::Q6_K ? 208 : t == DType::Q3_K ? 108 : 0), &scale, 2);
    if (t == DType::Q4_1 || t == DType::Q5_1) {
      const uint16_t m = static_cast<uint16_t>((0x1000 + rng() % 0x2000) | (rng() % 2 ? 0x8000 : 0));
      std::memcpy(blk + 2, &m, 2);
    }
    // dmin: positive as llama.cpp's quantizer writes it (mins are subtracted).
    if (t == DType::Q4_K || t == DType::Q5_K) {
      const uint16_t m = static_cast<uint16_t>(0x1000 + rng() % 0x2000);
      std::memcpy(blk + 2, &m, 2);
    }
  }
  return w;
}

// The constant part of activation block b's weights in a row (x = integer part + min): Q4_1's
// and Q5_1's stored min, Q4_K's and Q5_K's -(dmin * m_k) (core/kquant_layout.h), 0 for the other
// types.
double block_min(DType t, const uint8_t* row, int64_t b) {
  uint16_t h;
  if (t == DType::Q4_1 || t == DType::Q5_1) {
    std::memcpy(&h, row + (t == DType::Q4_1 ? 20 : 24) * b + 2, 2);
    return f16_to_f32(h);
  }
  if (t == DType::Q4_K || t == DType::Q5_K) {
    const uint8_t* blk = row + (t == DType::Q4_K ? 144 : 176) * (b / 8);
    const int k = static_cast<int>(b % 8);
    const uint8_t* s = blk + 4;
    const int m = k < 4 ? (s[k + 4] & 63) : ((s[k + 4] >> 4) | ((s[k] >> 6) << 4));
    std::memcpy(&h, blk + 2, 2);
    return -static_cast<double>(f16_to_f32(h)) * m;
  }
  return 0.0;
}

// Row `row`'s weights as stored (NF4: kCode * absmax), and as the int8 route multiplies them
// (NF4: d_w * round(kCode * 127) with d_w = absmax / 127; the others are the same values).
std::vector<double> stored_weights(DType t, const uint8_t* row) {
  std::vector<float> deq(kN);
  if (t == DType::NF4) nf4::dequantize_blocks(row, deq.data(), kN);
  else dequantize_row(t, row, deq.data(), kN);
  return std::vector<double>(deq.begin(), deq.end());
}
std::vector<double> route_weights(DType t, const uint8_t* row) {
  if (t != DType::NF4) return stored_weights(t, row);
  std::vector<double> w(kN);
  for (int64_t i = 0; i < kN; ++i) {
    const uint8_t* blk = row + nf4::kRowBlockBytes * (i / nf4::kBlock);
    float absmax;
    std::memcpy(&absmax, blk, 4);
    const int64_t e = i % nf4::kBlock;
    const int code = e % 2 == 0 ? blk[4 + e / 2] >> 4 : blk[4 + e / 2] & 0xF;
    w[static_cast<size_t>(i)] = static_cast<double>(absmax / 127.0f) * int8::nf4_levels()[code];
  }
  return w;
}

// One row against one token's quantized blocks in double, over the route's own values: exact =
// sum_b d_x sum_e w_e q_e (+ the min's m_w s_x), with w the route's dequantized weights (every
// partial exact in double). mag bounds every fp32 operand a reference adds: |d_w d_x p| <= d_x
// sum|d_w w_e q_e| and |m_w s_x|; m_w is the block's min (int8::has_min; d_w w_e = dequantized -
// m_w exactly).
struct DoubleDot {
  double exact, mag;
};
DoubleDot double_dot(DType t, const uint8_t* row, const BlockQ8* q, int64_t nb) {
  const std::vector<double> deq = route_weights(t, row);
  double exact = 0.0, mag = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8& qb = q[b];
    const double m = block_min(t, row, b);
    double block = 0.0, block_mag = 0.0;
    for (int e = 0; e < 32; ++e) {
      const double v = deq[static_cast<size_t>(32 * b + e)];
      block += v * qb.q[e];
      block_mag += std::fabs(v - m) * std::abs(static_cast<int>(qb.q[e]));
    }
    exact += block * static_cast<double>(qb.d);
    mag += block_mag * static_cast<double>(qb.d) + std::fabs(m * static_cast<double>(qb.s));
  }
  return {exact, mag};
}

std::vector<float> activations(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  // One block of zeros and one with a single outlier: d = 0, and q = +-127 at the outlier.
  for (int e = 0; e < 32; ++e) x[static_cast<size_t>(e)] = 0.0f;
  x[40] = 37.0f;
  return x;
}

std::vector<BlockQ8> quantize(const std::vector<float>& x) {
  std::vector<BlockQ8> q(x.size() / 32);
  int8::quantize_activations(x.data(), static_cast<int64_t>(x.size()), q.data());
  return q;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Int8Activations, RoundToNearestWithinHalfAStep) {
  const std::vector<float> x = activations(8 * kN, 1);
  const std::vector<BlockQ8> q = quantize(x);
  for (size_t b = 0; b < q.size(); ++b) {
    int sum = 0, qmax = 0;
    for (int e = 0; e < 32; ++e) {
      const float xe = x[32 * b + static_cast<size_t>(e)];
      const int qe = q[b].q[e];
      sum += qe;
      qmax = std::max(qmax, std::abs(qe));
      ASSERT_LE(std::abs(qe), 127);
      // |x - d q| <= d/2 + 2u|x| (x * (1/d) rounds twice: the reciprocal and the product).
      const double err = std::fabs(static_cast<double>(xe) - static_cast<double>(q[b].d) * qe);
      ASSERT_LE(err, static_cast<double>(q[b].d) / 2.0 + 2.5 * static_cast<double>(std::ldexp(std::fabs(xe), -24))) << "block " << b << " e " << e;
    }
    EXPECT_EQ(bits(q[b].s), bits(q[b].d * static_cast<float>(sum)));
    if (b == 0) {
      EXPECT_EQ(q[b].d, 0.0f);  // the zero block
    } else {
      EXPECT_EQ(qmax, 127) << "block " << b;  // the largest |x| maps to 127
    }
  }
  // Round half to even: x = 2.5 d and 3.5 d with d = 127/127 = 1.
  std::vector<float> ties(32, 0.0f);
  ties[0] = 127.0f, ties[1] = 2.5f, ties[2] = 3.5f, ties[3] = -2.5f;
  const std::vector<BlockQ8> tq = quantize(ties);
  EXPECT_EQ(tq[0].q[1], 2);
  EXPECT_EQ(tq[0].q[2], 4);
  EXPECT_EQ(tq[0].q[3], -2);
}

TEST(Int8Activations, NonFiniteBlockGivesNaN) {
  std::vector<float> x = activations(kN, 2);
  x[100] = std::numeric_limits<float>::infinity();
  const std::vector<BlockQ8> q = quantize(x);
  EXPECT_TRUE(std::isnan(q[3].d));
  EXPECT_FALSE(std::isnan(q[2].d));
  const std::vector<uint8_t> w = weight_rows(DType::Q8_0, 1, 3);
  EXPECT_TRUE(std::isnan(int8::dot_scalar(DType::Q8_0, w.data(), q.data(), kN / 32)));
  float y = 0.0f;
  int8::dot_rows(DType::Q8_0, w.data(), q.data(), kN / 32, 1, &y, 1);
  EXPECT_TRUE(std::isnan(y));
}

// The vectorized quantization equals the scalar reference bit for bit: normal blocks, the zero
// block, an outlier, ties, a non-finite block, tiny (denormal) values whose d's reciprocal is inf.
TEST(Int8Activations, VectorizedEqualsScalarReference) {
  std::vector<float> x = activations(64 * 32, 4);
  for (int e = 0; e < 32; ++e) {
    x[static_cast<size_t>(64 + e)] = (e % 4 - 1.5f) * 0.5f;                         // ties at d = 1.5 / 127
    x[static_cast<size_t>(96 + e)] = std::ldexp(static_cast<float>(e - 16), -140);  // denormals
    x[static_cast<size_t>(128 + e)] = static_cast<float>(e);
  }
  x[140] = std::numeric_limits<float>::quiet_NaN();
  x[200] = -std::numeric_limits<float>::infinity();
  std::vector<BlockQ8> a(x.size() / 32), b(x.size() / 32);
  int8::quantize_activations(x.data(), static_cast<int64_t>(x.size()), a.data());
  int8::quantize_activations_scalar(x.data(), static_cast<int64_t>(x.size()), b.data());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(bits(a[i].d), bits(b[i].d)) << "block " << i;
    ASSERT_EQ(bits(a[i].s), bits(b[i].s)) << "block " << i;
    ASSERT_EQ(std::memcmp(a[i].q, b[i].q, 32), 0) << "block " << i;
  }
}

class Int8Dot : public ::testing::TestWithParam<DType> {};

// Every path this CPU can run gives the scalar reference's bits, one row against 1..9 tokens.
// Paths the CPU lacks are named in the test's output, not claimed.
TEST_P(Int8Dot, EveryPathMatchesScalarReferenceBitForBit) {
  const DType t = GetParam();
  constexpr int kRows = 6, kTok = 9;
  const std::vector<uint8_t> w = weight_rows(t, kRows, 11);
  const std::vector<float> x = activations(kTok * kN, 12);
  const std::vector<BlockQ8> q = quantize(x);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  std::string untested;
  for (Isa isa : kIsas) {
    if (!cpu_supports(isa)) {
      untested += std::string(untested.empty() ? "" : ", ") + isa_name(isa);
      continue;
    }
    for (int r = 0; r < kRows; ++r) {
      for (int ntok = 1; ntok <= kTok; ++ntok) {
        std::vector<float> y(static_cast<size_t>(ntok * 3), -1.0f);  // stride 3
        int8::dot_rows_with(isa, t, w.data() + r * rb, q.data(), nb, ntok, y.data(), 3);
        for (int k = 0; k < ntok; ++k) {
          const float want = int8::dot_scalar(t, w.data() + r * rb, q.data() + k * nb, nb);
          ASSERT_EQ(bits(y[static_cast<size_t>(3 * k)]), bits(want))
              << dtype_name(t) << " " << isa_name(isa) << " row " << r << " token " << k << " of " << ntok;
        }
      }
    }
  }
  if (!untested.empty()) {
    RecordProperty("untested_paths", untested);
    std::cout << "[ NOTE ] not executed (this CPU lacks them): " << untested << "\n";
  }
}

// dot_row_block (several rows per call, token by token through the one-token kernels) gives
// every element the scalar reference's bits, and writes nothing past its rows, for 1..19 rows (the
// one-token kernels' groups of 8 rows and the rows after them) and 1..6 tokens on every path this
// CPU runs.
TEST_P(Int8Dot, RowBlocksMatchScalarReferenceBitForBit) {
  const DType t = GetParam();
  constexpr int kRows = 19, kTok = 6;
  const std::vector<uint8_t> w = weight_rows(t, kRows, 13);
  const std::vector<BlockQ8> q = quantize(activations(kTok * kN, 14));
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  for (Isa isa : kIsas) {
    if (!cpu_supports(isa)) continue;  // named by EveryPathMatchesScalarReferenceBitForBit
    for (int nrows = 1; nrows <= kRows; ++nrows)
      for (int ntok = 1; ntok <= kTok; ++ntok) {
        std::vector<float> y(static_cast<size_t>(ntok * kRows), -1.0f);  // (ntok, kRows): y stride kRows
        int8::dot_row_block_with(isa, t, w.data(), rb, nrows, q.data(), nb, ntok, y.data(), kRows);
        for (int k = 0; k < ntok; ++k)
          for (int r = 0; r < kRows; ++r) {
            const float got = y[static_cast<size_t>(k * kRows + r)];
            if (r >= nrows) {
              ASSERT_EQ(got, -1.0f) << "row " << r << " written past nrows " << nrows;
              continue;
            }
            ASSERT_EQ(bits(got), bits(int8::dot_scalar(t, w.data() + r * rb, q.data() + k * nb, nb)))
                << dtype_name(t) << " " << isa_name(isa) << " row " << r << " of " << nrows << ", token " << k
                << " of " << ntok;
          }
      }
  }
}

// The reference's integer sums, checked against an independent sum in double over the same
// quantized values: sum_b d_w d_x sum_e w_e q_e (+ m_w s_x) with dequantized weights w.
// double holds every partial exactly; one fp32 accumulator of nb terms, each with its scale product
// rounded, gives |error| <= (nb + 1) * 2 * eps * sum|terms|.
TEST_P(Int8Dot, ReferenceIntegerSumsMatchDouble) {
  const DType t = GetParam();
  const std::vector<uint8_t> w = weight_rows(t, 4, 21);
  const std::vector<float> x = activations(kN, 22);
  const std::vector<BlockQ8> q = quantize(x);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  for (int r = 0; r < 4; ++r) {
    const auto [exact, mag] = double_dot(t, w.data() + r * rb, q.data(), nb);
    const double eps = std::numeric_limits<float>::epsilon();
    const double got = int8::dot_scalar(t, w.data() + r * rb, q.data(), nb);
    // The min enters as m * s (s = d * sum q, rounded once): one more relative eps per block.
    EXPECT_LE(std::fabs(got - exact), static_cast<double>(nb + 1) * 2 * eps * mag)
        << dtype_name(t) << " row " << r << " got " << got << " exact " << exact;
  }
}

// Against the exact fp32 dot of the unquantized activations: the int8 route's error is the
// activation rounding, |x - d q| <= d/2 + 2u|x| per element (test above), times |w|, plus the
// fp32 summation bound of test_quant's check_dot on the rounded terms; for NF4 also the weight
// rounding |w - d_w round(127 kCode)| times |x|.
TEST_P(Int8Dot, WithinActivationRoundingBoundOfExactDot) {
  const DType t = GetParam();
  constexpr int kRows = 16;
  const std::vector<uint8_t> w = weight_rows(t, kRows, 31);
  const std::vector<float> x = activations(kN, 32);
  const std::vector<BlockQ8> q = quantize(x);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  double worst = 0.0;
  for (int r = 0; r < kRows; ++r) {
    const std::vector<double> stored = stored_weights(t, w.data() + r * rb), used = route_weights(t, w.data() + r * rb);
    double exact = 0.0, bound = 0.0, mag = 0.0;
    for (int64_t i = 0; i < kN; ++i) {
      const double wi = used[static_cast<size_t>(i)], xi = x[static_cast<size_t>(i)];
      exact += stored[static_cast<size_t>(i)] * xi;
      bound += std::fabs(wi) * (static_cast<double>(q[static_cast<size_t>(i / 32)].d) / 2.0 + 2.5 * std::ldexp(std::fabs(xi), -24));
      // NF4's weight rounding (0 for the other types), itself held to quant_int8.h's bound.
      const double dw = std::fabs(stored[static_cast<size_t>(i)] - wi);
      if (t == DType::NF4) {
        float absmax;
        std::memcpy(&absmax, w.data() + r * rb + nf4::kRowBlockBytes * (i / nf4::kBlock), 4);
        EXPECT_LE(dw, static_cast<double>(absmax) * (1.0 / 254.0 + std::ldexp(1.0, -23))) << "element " << i;
      }
      bound += dw * std::fabs(xi);
      mag += std::fabs(wi * xi);
    }
    const double eps = std::numeric_limits<float>::epsilon();
    bound += static_cast<double>(kN + 8) * 2 * eps * (mag + bound);
    float y = 0.0f;
    int8::dot_rows(t, w.data() + r * rb, q.data(), nb, 1, &y, 1);
    EXPECT_LE(std::fabs(static_cast<double>(y) - exact), bound) << dtype_name(t) << " row " << r;
    worst = std::max(worst, std::fabs(static_cast<double>(y) - exact) / bound);
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Types, Int8Dot, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(Int8Dot, Nf4LevelsAreTheCodeTimes127Rounded) {
  // bitsandbytes' levels: -1 ... 1 -> -127 ... 127; the nearest integers, checked in double.
  for (size_t i = 0; i < nf4::kCode.size(); ++i) {
    const double want = std::nearbyint(static_cast<double>(nf4::kCode[i]) * 127.0);
    EXPECT_EQ(int8::nf4_levels()[i], static_cast<int8_t>(want)) << "code " << i;
    EXPECT_LE(std::fabs(static_cast<double>(nf4::kCode[i]) * 127.0 - want), 0.5);
  }
  EXPECT_EQ(int8::nf4_levels()[0], -127);
  EXPECT_EQ(int8::nf4_levels()[7], 0);
  EXPECT_EQ(int8::nf4_levels()[15], 127);
}

// The one-row kernel's prefetch distance (quant_int8.cpp says what was measured on which CPU):
// 4096 bytes on Zen 4 only, the CPU where it was measured faster; Zen 3 (the same family, no
// AVX-512), Zen 5 and Intel keep 16384. The results do not depend on it (the tests above).
TEST(Int8Dot, OneRowPrefetchDistanceFollowsTheCpu) {
  CpuFeatures zen4;
  zen4.amd = zen4.avx512f = true;
  zen4.family = 25;
  zen4.model = 17;
  EXPECT_EQ(int8::one_row_prefetch_bytes(zen4), 4096);
  CpuFeatures zen3 = zen4;
  zen3.avx512f = false;
  zen3.model = 1;
  EXPECT_EQ(int8::one_row_prefetch_bytes(zen3), 16384);
  CpuFeatures zen5 = zen4;
  zen5.family = 26;
  zen5.model = 2;
  EXPECT_EQ(int8::one_row_prefetch_bytes(zen5), 16384);
  CpuFeatures xeon = zen4;
  xeon.amd = false;
  xeon.intel = true;
  xeon.family = 6;
  xeon.model = 207;
  EXPECT_EQ(int8::one_row_prefetch_bytes(xeon), 16384);
  EXPECT_EQ(int8::one_row_prefetch_bytes(), int8::one_row_prefetch_bytes(cpu_features()));
}

TEST(Int8Dot, SupportedTypesAndErrors) {
  EXPECT_TRUE(int8::supports(DType::Q8_0));
  EXPECT_TRUE(int8::supports(DType::Q4_K));
  EXPECT_TRUE(int8::supports(DType::Q5_0));
  EXPECT_TRUE(int8::supports(DType::Q5_1));
  EXPECT_TRUE(int8::supports(DType::Q5_K));
  EXPECT_TRUE(int8::supports(DType::Q6_K));
  EXPECT_TRUE(int8::supports(DType::NF4));
  EXPECT_FALSE(int8::supports(DType::F32));
  EXPECT_FALSE(int8::supports(DType::BF16));
  BlockQ8 b{};
  uint8_t w[210] = {};
  float y;
  EXPECT_THROW(int8::dot_rows(DType::BF16, w, &b, 1, 1, &y, 1), Internal);
  // A k-quant row is whole super-blocks (8 activation blocks).
  EXPECT_THROW(int8::dot_rows(DType::Q6_K, w, &b, 1, 1, &y, 1), Internal);
  EXPECT_THROW(int8::dot_rows(DType::Q5_K, w, &b, 1, 1, &y, 1), Internal);
  // An NF4 row is whole blocks of 64 (2 activation blocks).
  EXPECT_THROW(int8::dot_rows(DType::NF4, w, &b, 1, 1, &y, 1), Internal);
  EXPECT_THROW(int8::quantize_activations(nullptr, 31, &b), Internal);
}

// ---- The GEMM (core/int8_gemm.h) ----

const DType kGemmTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1,   DType::Q5_0,
                            DType::Q5_1, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                            DType::Q6_K, DType::NF4,  DType::IQ4_NL, DType::IQ4_XS};

class Int8Gemm : public ::testing::TestWithParam<DType> {};

// Every GEMM kernel: the three a CPU may take, and the AVX-VNNI one with its instruction emulated
// by AVX2 (int8_gemm.h), which stands in for it on CPUs without AVX-VNNI.
struct GemmKernel {
  std::string name;
  bool runs_here;
  void (*run)(Isa, DType, const uint8_t*, int64_t, int64_t, const int8::PackedTokens&, float*, int64_t);
  Isa isa;
};

std::vector<GemmKernel> gemm_kernels() {
  std::vector<GemmKernel> out;
  for (const Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni})
    out.push_back({std::string(isa_name(isa)) + " gemm", cpu_supports(isa),
                   // With rows to prefetch (the call's own: memory that exists), which must change
                   // nothing.
                   [](Isa i, DType t, const uint8_t* w, int64_t rb, int64_t nrows,
                      const int8::PackedTokens& x, float* y, int64_t stride) {
                     int8::gemm_rows_with(i, t, w, rb, nrows, x, y, stride, w, nrows);
                   },
                   isa});
  out.push_back({"avxvnni gemm with vpdpbusd emulated", cpu_supports(Isa::kAvx2),
                 [](Isa, DType t, const uint8_t* w, int64_t rb, int64_t nrows, const int8::PackedTokens& x,
                    float* y, int64_t stride) { int8::gemm_rows_avxvnni_emulated(t, w, rb, nrows, x, y, stride); },
                 Isa::kAvx2});
  return out;
}

// Every element of each GEMM kernel this CPU can run has dot_scalar's bits, for row counts that
// leave remainders after the kernels' row tiles (AVX-512: 8, or 6 with mins; AVX2: 3) and token
// counts around their token tiles (16; AVX2 also 8 for a panel's last 8 or fewer), and nothing is
// written past the rows asked for.
TEST_P(Int8Gemm, EveryKernelMatchesScalarReferenceBitForBit) {
  const DType t = GetParam();
  constexpr int kRows = 19, kStride = 23;
  const std::vector<uint8_t> w = weight_rows(t, kRows, 41);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  std::string untested;
  for (const GemmKernel& kernel : gemm_kernels()) {
    if (!kernel.runs_here) {
      untested += (untested.empty() ? "" : ", ") + kernel.name;
      continue;
    }
    for (const int ntok : {1, 7, 8, 9, 15, 16, 17, 40}) {
      const std::vector<BlockQ8> q = quantize(activations(ntok * kN, 42 + ntok));
      int8::PackedTokens packed;
      int8::pack_tokens(q.data(), nb, ntok, &packed);
      for (const int nrows : {1, 3, 4, 5, 6, 8, 13, 19}) {
        std::vector<float> y(static_cast<size_t>(ntok * kStride), -1.0f);
        kernel.run(kernel.isa, t, w.data(), rb, nrows, packed, y.data(), kStride);
        for (int k = 0; k < ntok; ++k)
          for (int r = 0; r < kStride; ++r) {
            const float got = y[static_cast<size_t>(k * kStride + r)];
            if (r >= nrows) {
              ASSERT_EQ(got, -1.0f) << kernel.name << ": row " << r << " written past nrows " << nrows;
              continue;
            }
            ASSERT_EQ(bits(got), bits(int8::dot_scalar(t, w.data() + r * rb, q.data() + k * nb, nb)))
                << kernel.name << " " << dtype_name(t) << " row " << r << " of " << nrows << ", token " << k
                << " of " << ntok;
          }
      }
    }
  }
  if (!untested.empty()) {
    RecordProperty("untested_paths", untested);
    std::cout << "[ NOTE ] not executed (this CPU lacks them): " << untested << "\n";
  }
}

// The operands at their limits, where a kernel's narrow intermediate would saturate if its bound
// were wrong (int8_gemm_avx2.cpp: pair sums up to 2 * 128 * 127 in int16, and a Q4 block's 8
// groups summed in int16 up to 30480; quant_int8_body.h's scaled_lanes: Q6_K's int16 pair sums
// times its int8 scales): every weight at its extreme integer (Q8_0 -128, NF4 -127, nibbles 15,
// Q5_0 -16, Q5_1 and Q5_K 31: summed in int16 as the nibbles are, the last two would overflow;
// Q6_K -32, Q3_K -4, IQ4_NL and IQ4_XS -127), Q6_K's, Q3_K's and IQ4_XS's scales at theirs (-128,
// -32, -32), and every activation +-127 (blocks of constant sign and magnitude). kRows rows of kN,
// then kTok tokens' blocks.
struct ExtremeOperands {
  static constexpr int kRows = 9, kTok = 20;  // 9 rows: the one-token kernels take 8 at a time
  std::vector<uint8_t> w;
  std::vector<BlockQ8> q;
};

ExtremeOperands extreme_operands(DType t) {
  ExtremeOperands e;
  e.w = weight_rows(t, ExtremeOperands::kRows, 45);
  const int64_t rb = dtype_row_bytes(t, kN), bb = dtype_block_bytes(t);
  // A block's integer bytes [begin, end): after its scales (Q5_K's 16, then qh and qs) or NF4's
  // absmax; Q6_K's ql and qh come first (its scales and d last); IQ4_XS's 6-bit scales (zero bytes:
  // -32) and nibbles after d.
  const int64_t begin = t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 ||
                                t == DType::IQ4_NL || t == DType::IQ4_XS
                            ? 2
                        : t == DType::Q4_K || t == DType::Q5_K                   ? 16
                        : t == DType::Q6_K || t == DType::Q3_K                   ? 0
                                                                                 : 4;
  const int64_t end = t == DType::Q6_K ? 192 : t == DType::Q3_K ? 96 : bb;
  // Q6_K's, Q3_K's and the IQ4 types' zero bytes are their most negative integers (-32, -4,
  // -127).
  const bool zero = t == DType::NF4 || t == DType::Q5_0 || t == DType::Q6_K || t == DType::Q3_K ||
                    t == DType::IQ4_NL || t == DType::IQ4_XS;
  const uint8_t extreme = t == DType::Q8_0 ? 0x80 : zero ? 0x00 : 0xFF;
  for (int64_t b = 0; b < rb * ExtremeOperands::kRows / bb; ++b) {
    uint8_t* blk = e.w.data() + b * bb;
    std::memset(blk + begin, extreme, static_cast<size_t>(end - begin));
    // Q6_K's int8 scales -128; Q3_K's 6-bit scales 0, that is -32.
    if (t == DType::Q6_K) std::memset(blk + 192, 0x80, 16);
    if (t == DType::Q3_K) std::memset(blk + 96, 0x00, 12);
  }
  std::vector<float> x(static_cast<size_t>(ExtremeOperands::kTok * kN));
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 32 + i / kN) % 2 ? 1.0f : -1.0f;
  e.q = quantize(x);
  return e;
}

TEST_P(Int8Gemm, ExtremeOperandsStayExact) {
  const DType t = GetParam();
  const ExtremeOperands e = extreme_operands(t);
  constexpr int kRows = ExtremeOperands::kRows, kTok = ExtremeOperands::kTok;
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  ASSERT_EQ(std::abs(static_cast<int>(e.q[0].q[0])), 127);
  int8::PackedTokens packed;
  int8::pack_tokens(e.q.data(), nb, kTok, &packed);
  for (const GemmKernel& kernel : gemm_kernels()) {
    if (!kernel.runs_here) continue;  // named by EveryKernelMatchesScalarReferenceBitForBit
    std::vector<float> y(kTok * kRows);
    kernel.run(kernel.isa, t, e.w.data(), rb, kRows, packed, y.data(), kRows);
    for (int k = 0; k < kTok; ++k)
      for (int r = 0; r < kRows; ++r)
        ASSERT_EQ(bits(y[static_cast<size_t>(k * kRows + r)]),
                  bits(int8::dot_scalar(t, e.w.data() + r * rb, e.q.data() + k * nb, nb)))
            << kernel.name << " " << dtype_name(t) << " row " << r << ", token " << k;
  }
}

// The same operands through the row kernels of every path this CPU runs (1..5 tokens; 9 rows: a
// group of 8 and one row alone).
TEST_P(Int8Dot, ExtremeOperandsStayExact) {
  const DType t = GetParam();
  const ExtremeOperands e = extreme_operands(t);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  for (Isa isa : kIsas) {
    if (!cpu_supports(isa)) continue;  // named by EveryPathMatchesScalarReferenceBitForBit
    for (int ntok = 1; ntok <= 5; ++ntok) {
      std::vector<float> y(static_cast<size_t>(ntok * ExtremeOperands::kRows));
      int8::dot_row_block_with(isa, t, e.w.data(), rb, ExtremeOperands::kRows, e.q.data(), nb, ntok,
                               y.data(), ExtremeOperands::kRows);
      for (int k = 0; k < ntok; ++k)
        for (int r = 0; r < ExtremeOperands::kRows; ++r)
          ASSERT_EQ(bits(y[static_cast<size_t>(k * ExtremeOperands::kRows + r)]),
                    bits(int8::dot_scalar(t, e.w.data() + r * rb, e.q.data() + k * nb, nb)))
              << isa_name(isa) << " " << dtype_name(t) << " row " << r << ", token " << k << " of "
              << ntok;
    }
  }
}

// gemm_rows takes gemm_isa()'s kernel: its bits are that kernel's.
TEST_P(Int8Gemm, DispatchTakesTheActiveKernel) {
  if (!int8::gemm_available()) GTEST_SKIP() << "MEDTUNE_ISA=scalar: no GEMM kernel is dispatched";
  const DType t = GetParam();
  const std::vector<uint8_t> w = weight_rows(t, 9, 43);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  const std::vector<BlockQ8> q = quantize(activations(20 * kN, 44));
  int8::PackedTokens packed;
  int8::pack_tokens(q.data(), nb, 20, &packed);
  std::vector<float> a(20 * 9), b(20 * 9);
  int8::gemm_rows(t, w.data(), rb, 9, packed, a.data(), 9);
  int8::gemm_rows_with(int8::gemm_isa(), t, w.data(), rb, 9, packed, b.data(), 9);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << "element " << i;
  EXPECT_EQ(int8::gemm_isa(), active_isa());  // every ISA from AVX2 up has its own GEMM kernel
}

// The GEMM and the row kernels perform the same operations (quant_int8.h), so a token's result
// has the same bits whichever of them runs: alone (rows, as the server's batch-invariant mode) or in
// a batch (the GEMM, as eval and prompts). Token counts around the row kernels' tile of 4 and the
// GEMM's panels of 16; every pair of kernels this CPU can run.
TEST_P(Int8Gemm, GemmAndRowKernelsGiveTheSameBits) {
  const DType t = GetParam();
  constexpr int kRows = 7;
  const std::vector<uint8_t> w = weight_rows(t, kRows, 51);
  const int64_t nb = kN / 32, rb = dtype_row_bytes(t, kN);
  for (const int ntok : {1, 4, 5, 17}) {
    const std::vector<BlockQ8> q = quantize(activations(ntok * kN, 52 + ntok));
    int8::PackedTokens packed;
    int8::pack_tokens(q.data(), nb, ntok, &packed);
    for (const GemmKernel& kernel : gemm_kernels()) {
      if (!kernel.runs_here) continue;  // named by EveryKernelMatchesScalarReferenceBitForBit
      std::vector<float> g(static_cast<size_t>(ntok * kRows));
      kernel.run(kernel.isa, t, w.data(), rb, kRows, packed, g.data(), kRows);
      for (const Isa row_isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
        if (!cpu_supports(row_isa)) continue;
        std::vector<float> r(g.size());
        int8::dot_row_block_with(row_isa, t, w.data(), rb, kRows, q.data(), nb, ntok, r.data(), kRows);
        for (size_t i = 0; i < g.size(); ++i)
          ASSERT_EQ(bits(g[i]), bits(r[i])) << dtype_name(t) << " " << kernel.name << " against "
                                            << isa_name(row_isa) << " rows, element " << i << " of " << ntok
                                            << " tokens";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Int8Gemm, ::testing::ValuesIn(kGemmTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// The packed tokens, element by element, against what int8_gemm.h's layout says they hold: q's
// 4-byte groups, -128 * sum(q), d and s of each real token, zeros in the padding lanes; packed
// from quantized blocks (pack_tokens) and quantized and packed in one pass (quantize_pack_panel,
// on each path this CPU can run), also into a PackedTokens that a wider call grew before
// (size_packed only grows it). The last token holds the blocks that test the quantization's
// corners (ties, denormals that make 1 / d infinite, NaN, -inf), packed as quantize_activations
// (checked against the scalar reference above) wrote them.
TEST(Int8Gemm, PackedTokensHoldTheLayoutBothWays) {
  constexpr int64_t kGroupsPerBlock = 8;
  std::string untested;
  for (const int64_t ntok : {1, 15, 16, 17, 40}) {
    std::vector<float> x = activations(ntok * kN, 77 + ntok);
    x[static_cast<size_t>((ntok / 2) * kN + 40)] = std::numeric_limits<float>::infinity();
    float* last = x.data() + (ntok - 1) * kN;
    for (int e = 0; e < 32; ++e) {
      last[64 + e] = (e % 4 - 1.5f) * 0.5f;                         // ties at d = 1.5 / 127
      last[96 + e] = std::ldexp(static_cast<float>(e - 16), -140);  // denormals
      last[128 + e] = static_cast<float>(e);
    }
    last[140 + 32] = std::numeric_limits<float>::quiet_NaN();
    last[200 + 32] = -std::numeric_limits<float>::infinity();
    const std::vector<BlockQ8> q = quantize(x);
    const int64_t nb = kN / 32;
    int8::PackedTokens from_blocks, fused_avx2, fused_avx512;
    int8::pack_tokens(q.data(), nb, ntok, &from_blocks);
    std::vector<std::pair<const int8::PackedTokens*, std::string>> packed{
        {&from_blocks, "pack_tokens"}};
    for (const auto& [isa, fused] : {std::pair{Isa::kAvx2, &fused_avx2},
                                     std::pair{Isa::kAvx512Vnni, &fused_avx512}}) {
      if (!cpu_supports(isa)) {
        if (ntok == 1) untested += std::string(untested.empty() ? "" : ", ") + isa_name(isa);
        continue;
      }
      int8::size_packed(3 * nb, ntok + 20, fused);  // grown wider first
      int8::size_packed(nb, ntok, fused);
      for (int64_t p = 0; p < fused->panels; ++p) int8::quantize_pack_panel_with(isa, x.data(), p, fused);
      packed.emplace_back(fused, std::string("quantize_pack_panel ") + isa_name(isa));
    }
    for (const auto& [pk, how] : packed) {
      ASSERT_EQ(pk->panels, (ntok + 15) / 16) << how;
      for (int64_t p = 0; p < pk->panels; ++p)
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t lane = 0; lane < 16; ++lane) {
            const int64_t k = p * 16 + lane, cell = p * nb + b;
            const bool real = k < ntok;
            int32_t sum = 0;
            for (int64_t g = 0; g < kGroupsPerBlock; ++g)
              for (int64_t e = 0; e < 4; ++e) {
                const int8_t want = real ? q[static_cast<size_t>(k * nb + b)].q[4 * g + e] : 0;
                sum += want;
                ASSERT_EQ(pk->q[static_cast<size_t>(((cell * kGroupsPerBlock + g) * 16 + lane) * 4 + e)], want)
                    << how << " ntok " << ntok << " token " << k << " block " << b;
              }
            const auto at = static_cast<size_t>(cell * 16 + lane);
            ASSERT_EQ(pk->comp[at], -128 * sum) << how << " token " << k << " block " << b;
            ASSERT_EQ(bits(pk->d[at]), bits(real ? q[static_cast<size_t>(k * nb + b)].d : 0.0f)) << how;
            ASSERT_EQ(bits(pk->s[at]), bits(real ? q[static_cast<size_t>(k * nb + b)].s : 0.0f)) << how;
          }
    }
  }
  if (!untested.empty()) std::cout << "quantize_pack_panel paths not run on this CPU: " << untested << "\n";
}

TEST(Int8Gemm, CoversEveryTypeWithAnInt8Kernel) {
  for (const DType t : kGemmTypes) EXPECT_TRUE(int8::gemm_supports(t)) << dtype_name(t);
  for (const DType t : kTypes) EXPECT_TRUE(int8::gemm_supports(t)) << dtype_name(t);
  EXPECT_FALSE(int8::gemm_supports(DType::F32));
  EXPECT_FALSE(int8::gemm_supports(DType::F16));
  int8::PackedTokens packed;
  uint8_t w[210] = {};
  float y;
  EXPECT_THROW(int8::gemm_rows(DType::F16, w, 64, 1, packed, &y, 1), Internal);
  // A k-quant row is whole super-blocks (8 activation blocks).
  int8::size_packed(1, 1, &packed);
  EXPECT_THROW(int8::gemm_rows(DType::Q6_K, w, 210, 1, packed, &y, 1), Internal);
  for (const Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!cpu_supports(isa)) {
      EXPECT_THROW(int8::gemm_rows_with(isa, DType::Q8_0, w, 34, 1, packed, &y, 1), Internal);
    }
  }
  EXPECT_THROW(int8::gemm_rows_with(Isa::kScalar, DType::Q8_0, w, 34, 1, packed, &y, 1), Internal);
}

}  // namespace
}  // namespace medtune
