// dequantize_row / dot_row against gguf-py (llama.cpp's own Python port of ggml's reference
// dequantize_row_*). Fixtures: tools/make_gguf_fixtures.py -> tests/fixtures/quant/<TYPE>.blocks
// (1024 elements of raw ggml blocks: gguf-py-quantized weights and random bytes with valid f16
// scales) and <TYPE>.f32 (gguf.quants.dequantize of them). Dequantization must match bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/kquant_layout.h"
#include "core/quant.h"
#include "core/cpu_features.h"

// The scalar reference path in quant.cpp: always compiled, and tested on its own so that it stays
// a trustworthy reference on machines whose build takes the SIMD path.
namespace medtune::quant_detail {
void dequantize_row_scalar(DType t, const void* src, float* dst, int64_t n);
float dot_row_scalar(DType t, const void* src, const float* x, int64_t n);
float dot_row_bf16_scalar(DType t, const void* src, const float* x, int64_t n);
bool has_simd();
}  // namespace medtune::quant_detail

namespace medtune {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/quant/";
constexpr int64_t kN = 1024;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Fixture {
  DType t;
  std::vector<uint8_t> blocks;
  std::vector<float> expected;
};

Fixture load(DType t) {
  Fixture fx{t, read_bytes(kDir + std::string(dtype_name(t)) + ".blocks"), {}};
  const std::vector<uint8_t> f = read_bytes(kDir + std::string(dtype_name(t)) + ".f32");
  fx.expected.resize(f.size() / 4);
  std::memcpy(fx.expected.data(), f.data(), f.size());
  EXPECT_EQ(static_cast<int64_t>(fx.blocks.size()), dtype_row_bytes(t, kN)) << dtype_name(t);
  EXPECT_EQ(static_cast<int64_t>(fx.expected.size()), kN) << dtype_name(t);
  return fx;
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,   DType::Q3_K,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

// Index of the first float whose bits differ, or -1.
int64_t first_mismatch(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) return i;
  return -1;
}

class Quant : public ::testing::TestWithParam<DType> {};

TEST_P(Quant, DequantizeIsBitExactWithGgufPy) {
  const Fixture fx = load(GetParam());
  // Guard words around the output catch writes past n.
  std::vector<float> out(kN + 16, -7.0f);
  dequantize_row(fx.t, fx.blocks.data(), out.data() + 8, kN);
  const int64_t bad = first_mismatch(out.data() + 8, fx.expected.data(), kN);
  EXPECT_EQ(bad, -1) << dtype_name(fx.t) << " element " << bad << ": got "
                     << out[static_cast<size_t>(bad + 8)] << " want "
                     << fx.expected[static_cast<size_t>(bad < 0 ? 0 : bad)];
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[static_cast<size_t>(i)], -7.0f);
    EXPECT_EQ(out[static_cast<size_t>(kN + 8 + i)], -7.0f);
  }
}

TEST_P(Quant, ScalarReferenceIsBitExactWithGgufPy) {
  const Fixture fx = load(GetParam());
  std::vector<float> out(kN);
  quant_detail::dequantize_row_scalar(fx.t, fx.blocks.data(), out.data(), kN);
  const int64_t bad = first_mismatch(out.data(), fx.expected.data(), kN);
  EXPECT_EQ(bad, -1) << dtype_name(fx.t) << " element " << bad;
}

// Rows that start mid-buffer (one block, or 256 elements, at a time) decode the same.
TEST_P(Quant, DequantizeInPiecesMatches) {
  const Fixture fx = load(GetParam());
  const int64_t piece = dtype_block_elems(fx.t) == 1 ? 40 : dtype_block_elems(fx.t);
  std::vector<float> out(kN);
  for (int64_t i = 0; i < kN; i += piece) {
    const int64_t n = std::min(piece, kN - i);
    dequantize_row(fx.t, fx.blocks.data() + dtype_row_bytes(fx.t, i), out.data() + i, n);
  }
  EXPECT_EQ(first_mismatch(out.data(), fx.expected.data(), kN), -1) << dtype_name(fx.t);
}

// dot_row vs sum(double(dequantized) * double(x)).
// Bound: any order of fp32 summation of n rounded products has |error| <= gamma_k * sum|terms|
// with gamma_k = k*u/(1-k*u), u = 2^-24, k = n + a few (the product, a block-scale multiply
// when the scale is applied to a block's partial sum, the tree of partial sums). Hence
//     |dot_row - exact| <= (n + 8) * eps * sum_i |value_i * x_i|,   eps = 2^-23 = 2u
// (eps rather than u leaves a factor 2 for the 1/(1-k*u)), plus (n + 8) * the smallest
// subnormal for products that underflow (gradual underflow adds an absolute error per operation).
// With bf16, the same for dot_row_bf16 against the exact dot of the values rounded to bf16 (whose
// products with x are the fp32 products the kernels add: the same bound).
void check_dot(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& deq_in,
               int64_t n, uint64_t seed, bool bf16 = false) {
  std::vector<float> deq = deq_in;
  if (bf16)
    for (float& v : deq) v = round_through_bf16(v);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  double exact = 0.0, mag = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = deq[static_cast<size_t>(i)], xi = x[static_cast<size_t>(i)];
    exact += v * xi;
    mag += std::fabs(v * xi);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  const double tol = static_cast<double>(n + 8) *
                     (eps * mag + static_cast<double>(std::numeric_limits<float>::denorm_min()));
  const double fast =
      bf16 ? dot_row_bf16(t, blocks.data(), x.data(), n) : dot_row(t, blocks.data(), x.data(), n);
  const double ref = bf16 ? quant_detail::dot_row_bf16_scalar(t, blocks.data(), x.data(), n)
                          : quant_detail::dot_row_scalar(t, blocks.data(), x.data(), n);
  EXPECT_LE(std::fabs(fast - exact), tol)
      << dtype_name(t) << " n=" << n << " fast=" << fast << " exact=" << exact << " bf16=" << bf16;
  EXPECT_LE(std::fabs(ref - exact), tol)
      << dtype_name(t) << " n=" << n << " scalar=" << ref << " exact=" << exact << " bf16=" << bf16;
}

TEST_P(Quant, DotRowMatchesDoublePrecisionDot) {
  const Fixture fx = load(GetParam());
  const int64_t be = dtype_block_elems(fx.t);
  for (bool bf16 : {false, true}) {
    for (int64_t n : {be, 2 * be, int64_t{256}, int64_t{512}, kN}) {
      if (n % be == 0 && n <= kN)
        check_dot(fx.t, fx.blocks, fx.expected, n, static_cast<uint64_t>(n), bf16);
    }
    if (be == 1) {  // plain types: every tail length of the 32-wide SIMD loop
      for (int64_t n = 1; n <= 70; ++n)
        check_dot(fx.t, fx.blocks, fx.expected, n, 1000 + static_cast<uint64_t>(n), bf16);
    }
  }
}

// dot_row_bf16 against a one-hot x: the sum is the one rounded value alone (the other products
// are zeros), so every element of the row must come out as round_through_bf16 of its dequantized
// value exactly: a value left unrounded, rounded the wrong way at a tie, or read from the wrong
// position fails, which the summation bound above is too loose to see.
TEST_P(Quant, DotRowBf16RoundsEveryValue) {
  const Fixture fx = load(GetParam());
  std::vector<float> x(kN, 0.0f);
  int64_t changed = 0;  // values that rounding moves: the check has teeth only where there are some
  for (int64_t i = 0; i < kN; ++i) {
    x[static_cast<size_t>(i)] = 1.0f;
    const float want = round_through_bf16(fx.expected[static_cast<size_t>(i)]);
    changed += want != fx.expected[static_cast<size_t>(i)];
    ASSERT_EQ(dot_row_bf16(fx.t, fx.blocks.data(), x.data(), kN), want)
        << dtype_name(fx.t) << " element " << i;
    ASSERT_EQ(quant_detail::dot_row_bf16_scalar(fx.t, fx.blocks.data(), x.data(), kN), want)
        << dtype_name(fx.t) << " element " << i;
    x[static_cast<size_t>(i)] = 0.0f;
  }
  if (GetParam() == DType::BF16)
    EXPECT_EQ(changed, 0);  // stored bf16: nothing to round
  else if (GetParam() == DType::Q3_K)  // 3-bit q times a 6-bit scale: many values fit bf16 (376)
    EXPECT_GT(changed, kN / 4) << dtype_name(fx.t);
  else
    EXPECT_GT(changed, kN / 2) << dtype_name(fx.t);
}

// dot_row reads only x[0, n) and its row (ASan/valgrind catch overreads; here: exact n = 0).
TEST_P(Quant, EmptyRow) {
  const Fixture fx = load(GetParam());
  EXPECT_EQ(dot_row(fx.t, fx.blocks.data(), nullptr, 0), 0.0f);
  dequantize_row(fx.t, fx.blocks.data(), nullptr, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Quant, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

// Values the rounding must carry as round_through_bf16 does: ties to even, the largest finite
// values rounding up to inf, NaN payloads that an integer add would carry into the exponent or
// the sign, inf; and quantized blocks whose scale is inf or NaN (the kernels' slow path).
TEST(QuantBf16, SpecialValuesRoundAsTheScalarRounding) {
  const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu,
                           0x7f800001u, 0x7fffffffu, 0xffffffffu, 0x7f800000u,
                           0x00000001u, 0x80008000u, 0x7f7f8000u, 0x3f80ffffu};
  // One special value at a time (0 times inf or NaN elsewhere would be NaN), at a position in the
  // kernels' 32-wide loop and one in their tail (n = 70).
  for (const uint32_t b : bits)
    for (const int64_t pos : {int64_t{5}, int64_t{45}, int64_t{67}}) {
      std::vector<float> row(70, 0.5f), x(70, 0.0f);
      std::memcpy(&row[static_cast<size_t>(pos)], &b, 4);
      x[static_cast<size_t>(pos)] = 1.0f;
      const float want = round_through_bf16(row[static_cast<size_t>(pos)]);
      for (const float got :
           {dot_row_bf16(DType::F32, row.data(), x.data(), 70),
            quant_detail::dot_row_bf16_scalar(DType::F32, row.data(), x.data(), 70)}) {
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got)) << std::hex << b << " at " << pos;
        else
          EXPECT_EQ(got, want) << std::hex << b << " at " << pos;
      }
    }
  // Q8_0 blocks (34 bytes: f16 scale, 32 int8 quants of 1), one at a time: an inf scale gives
  // inf, NaN scales NaN (0x7fff: a payload that the finite rounding would carry into the sign,
  // giving -0), a finite one its exact sum. x = 1: every product is the rounded value.
  const std::vector<float> ones(32, 1.0f);
  for (const uint16_t scale :
       {uint16_t{0x7c00}, uint16_t{0x7e00}, uint16_t{0x7fff}, uint16_t{0xffff}, uint16_t{0x3c00}}) {
    std::vector<uint8_t> q8(34, 1);
    std::memcpy(q8.data(), &scale, 2);
    for (const float got :
         {dot_row_bf16(DType::Q8_0, q8.data(), ones.data(), 32),
          quant_detail::dot_row_bf16_scalar(DType::Q8_0, q8.data(), ones.data(), 32)}) {
      if (scale == 0x7c00)
        EXPECT_EQ(got, std::numeric_limits<float>::infinity());
      else if (scale == 0x3c00)
        EXPECT_EQ(got, 32.0f);
      else
        EXPECT_TRUE(std::isnan(got)) << std::hex << scale << ": " << got;
    }
  }
}

TEST(QuantErrors, UnsupportedTypeAndBadLength) {
  float out[32];
  const uint8_t buf[64] = {};
  EXPECT_THROW(dequantize_row(DType::F64, buf, out, 4), Internal);
  EXPECT_THROW(dot_row(DType::I32, buf, out, 4), Internal);
  EXPECT_THROW(dequantize_row(DType::Q8_0, buf, out, 16), Internal);  // not a whole block
  EXPECT_THROW(dot_row(DType::Q4_K, buf, out, 32), Internal);
  EXPECT_THROW(dot_row_bf16(DType::I32, buf, out, 4), Internal);
  EXPECT_THROW(dot_row_bf16(DType::Q4_K, buf, out, 32), Internal);
  EXPECT_THROW(quant_detail::dequantize_row_scalar(DType::I64, buf, out, 4), Internal);
}

// quant.cpp's claim that FMA contraction cannot change a dequantized value rests on every
// scale*quant product being exact in fp32. Check it over all f16 scales and quant ranges.
TEST(QuantExactness, ScaleTimesQuantIsExactInFp32) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half
    const double d = f16_to_f32(static_cast<uint16_t>(h));
    // Q4_K, Q5_K: d*sc, then (d*sc)*q with q < 16, q < 32; Q2_K (sc < 16, q < 4) and Q3_K
    // (|sc - 32| <= 32, |q| <= 4) within the same ranges, the signs changing nothing.
    for (int sc = 0; sc < 64; ++sc) {
      const float ds = static_cast<float>(d) * static_cast<float>(sc);
      ASSERT_EQ(static_cast<double>(ds), d * sc);
      for (int q = 1; q < 32; ++q)
        ASSERT_EQ(static_cast<double>(ds * static_cast<float>(q)), d * sc * q);
    }
    for (int q = -128; q < 128; ++q)  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL
      ASSERT_EQ(static_cast<double>(static_cast<float>(d) * static_cast<float>(q)), d * q);
    // IQ4_XS: d*(sc - 32), |sc - 32| <= 32 (exact above), then times a table value (|v| <= 127).
    for (int sc = 0; sc <= 32; ++sc) {
      const float ds = static_cast<float>(d) * static_cast<float>(sc);
      for (const int8_t v : kquant::kIq4nlValues)
        ASSERT_EQ(static_cast<double>(ds * static_cast<float>(v)), d * sc * v);
    }
  }
}

TEST(QuantInfo, ReportsPath) {
  RecordProperty("simd", quant_detail::has_simd() ? "avx2" : "scalar");
  // Run-time dispatch: the AVX2 kernels run wherever the CPU has them (unless MEDTUNE_ISA caps it).
  EXPECT_EQ(quant_detail::has_simd(), cpu_supports(Isa::kAvx2) && active_isa() >= Isa::kAvx2);
}

}  // namespace
}  // namespace medtune
