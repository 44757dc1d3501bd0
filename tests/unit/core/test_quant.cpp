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
#include "core/quant.h"
#include "core/cpu_features.h"

// The scalar reference path in quant.cpp: always compiled, and tested on its own so that it stays
// a trustworthy reference on machines whose build takes the SIMD path.
namespace medtune::quant_detail {
void dequantize_row_scalar(DType t, const void* src, float* dst, int64_t n);
float dot_row_scalar(DType t, const void* src, const float* x, int64_t n);
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

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};

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
void check_dot(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& deq,
               int64_t n, uint64_t seed) {
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
  const double fast = dot_row(t, blocks.data(), x.data(), n);
  const double ref = quant_detail::dot_row_scalar(t, blocks.data(), x.data(), n);
  EXPECT_LE(std::fabs(fast - exact), tol)
      << dtype_name(t) << " n=" << n << " fast=" << fast << " exact=" << exact;
  EXPECT_LE(std::fabs(ref - exact), tol)
      << dtype_name(t) << " n=" << n << " scalar=" << ref << " exact=" << exact;
}

TEST_P(Quant, DotRowMatchesDoublePrecisionDot) {
  const Fixture fx = load(GetParam());
  const int64_t be = dtype_block_elems(fx.t);
  for (int64_t n : {be, 2 * be, int64_t{256}, int64_t{512}, kN}) {
    if (n % be == 0 && n <= kN)
      check_dot(fx.t, fx.blocks, fx.expected, n, static_cast<uint64_t>(n));
  }
  if (be == 1) {  // plain types: every tail length of the 32-wide SIMD loop
    for (int64_t n = 1; n <= 70; ++n)
      check_dot(fx.t, fx.blocks, fx.expected, n, 1000 + static_cast<uint64_t>(n));
  }
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

TEST(QuantErrors, UnsupportedTypeAndBadLength) {
  float out[32];
  const uint8_t buf[64] = {};
  EXPECT_THROW(dequantize_row(DType::F64, buf, out, 4), Internal);
  EXPECT_THROW(dot_row(DType::I32, buf, out, 4), Internal);
  EXPECT_THROW(dequantize_row(DType::Q8_0, buf, out, 16), Internal);  // not a whole block
  EXPECT_THROW(dot_row(DType::Q4_K, buf, out, 32), Internal);
  EXPECT_THROW(quant_detail::dequantize_row_scalar(DType::I64, buf, out, 4), Internal);
}

// quant.cpp's claim that FMA contraction cannot change a dequantized value rests on every
// scale*quant product being exact in fp32. Check it over all f16 scales and quant ranges.
TEST(QuantExactness, ScaleTimesQuantIsExactInFp32) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half
    const double d = f16_to_f32(static_cast<uint16_t>(h));
    for (int sc = 0; sc < 64; ++sc) {  // Q4_K: d*sc, then (d*sc)*q with q < 16
      const float ds = static_cast<float>(d) * static_cast<float>(sc);
      ASSERT_EQ(static_cast<double>(ds), d * sc);
      for (int q = 1; q < 16; ++q)
        ASSERT_EQ(static_cast<double>(ds * static_cast<float>(q)), d * sc * q);
    }
    for (int q = -128; q < 128; ++q)  // Q8_0, Q4_0, Q4_1
      ASSERT_EQ(static_cast<double>(static_cast<float>(d) * static_cast<float>(q)), d * q);
  }
}

TEST(QuantInfo, ReportsPath) {
  RecordProperty("simd", quant_detail::has_simd() ? "avx2" : "scalar");
  // Run-time dispatch: the AVX2 kernels run wherever the CPU has them (unless MEDTUNE_ISA caps it).
  EXPECT_EQ(quant_detail::has_simd(), cpu_supports(Isa::kAvx2) && active_isa() >= Isa::kAvx2);
}

}  // namespace
}  // namespace medtune
