// NF4 against bitsandbytes 0.50.2's CPU path, bit for bit. Fixtures: tools/make_nf4_fixtures.py
// -> tests/fixtures/nf4/ (inputs incl. zeros, exact ties, huge values and subnormals, lengths
// that are not multiples of 64 and odd). Everything compared here is exact equality of bytes or
// of fp32 bit patterns: no tolerance (bnb's arithmetic is fp32 operations we reproduce in order).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/nf4.h"

namespace medtune {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/nf4/";

std::vector<uint8_t> read_bytes(const std::string& name) {
  std::ifstream f(kDir + name, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << kDir + name;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_f32(const std::string& name) {
  const std::vector<uint8_t> b = read_bytes(name);
  std::vector<float> v(b.size() / 4);
  if (!b.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Bit patterns, so that -0.0 vs 0.0 and NaN payloads count as differences.
std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

struct Case {
  std::string name;
  int64_t n;
};
// tests/fixtures/nf4/manifest.json "cases"
const std::vector<Case> kCases = {{"normal_2368", 2368}, {"matrix_300x64", 19200},
                                  {"zeros_128", 128},    {"ties_128", 128},
                                  {"huge_tiny_192", 192}, {"odd_101", 101},
                                  {"remainder_200", 200}};

TEST(Nf4, TablesAreBitsandbytes) {
  const std::vector<float> code = read_f32("nf4_code.f32");
  ASSERT_EQ(code.size(), 16u);
  EXPECT_EQ(bits(code), bits(std::vector<float>(nf4::kCode.begin(), nf4::kCode.end())));
  const std::vector<float> dyn = read_f32("dynamic_map.f32");
  ASSERT_EQ(dyn.size(), 256u);
  const auto& m = nf4::dynamic_map();
  EXPECT_EQ(bits(dyn), bits(std::vector<float>(m.begin(), m.end())));
}

TEST(Nf4, QuantizeMatchesBitsandbytes) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> x = read_f32(c.name + ".in.f32");
    ASSERT_EQ(static_cast<int64_t>(x.size()), c.n);
    const int64_t nb = (c.n + nf4::kBlock - 1) / nf4::kBlock;
    std::vector<uint8_t> packed(static_cast<size_t>((c.n + 1) / 2));
    std::vector<float> absmax(static_cast<size_t>(nb));
    nf4::quantize(x.data(), c.n, packed.data(), absmax.data());
    EXPECT_EQ(packed, read_bytes(c.name + ".packed"));
    EXPECT_EQ(bits(absmax), bits(read_f32(c.name + ".absmax.f32")));
  }
}

TEST(Nf4, DoubleQuantizationMatchesBitsandbytes) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> absmax = read_f32(c.name + ".absmax.f32");
    const nf4::NestedAbsmax s = nf4::quantize_absmax(absmax.data(), static_cast<int64_t>(absmax.size()));
    EXPECT_EQ(bits({s.offset}), bits(read_f32(c.name + ".nested.offset.f32")));
    EXPECT_EQ(s.q, read_bytes(c.name + ".nested.qabsmax"));
    EXPECT_EQ(bits(s.absmax2), bits(read_f32(c.name + ".nested.absmax2.f32")));
  }
}

TEST(Nf4, DequantizeMatchesBitsandbytes) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> packed = read_bytes(c.name + ".packed");
    const std::vector<float> absmax = read_f32(c.name + ".absmax.f32");
    std::vector<float> out(static_cast<size_t>(c.n)), ref(static_cast<size_t>(c.n));
    nf4::dequantize(packed.data(), absmax.data(), out.data(), c.n);
    nf4::dequantize_scalar(packed.data(), absmax.data(), ref.data(), c.n);
    EXPECT_EQ(bits(out), bits(read_f32(c.name + ".deq.f32")));
    EXPECT_EQ(bits(ref), bits(out));
    // through bnb's nested statistics, read from the fixture (as a checkpoint would give them)
    const std::vector<uint8_t> q = read_bytes(c.name + ".nested.qabsmax");
    const std::vector<float> absmax2 = read_f32(c.name + ".nested.absmax2.f32");
    const float offset = read_f32(c.name + ".nested.offset.f32").at(0);
    std::vector<float> resolved(q.size());
    nf4::dequantize_absmax(q.data(), absmax2.data(), offset, static_cast<int64_t>(q.size()), resolved.data());
    nf4::dequantize(packed.data(), resolved.data(), out.data(), c.n);
    EXPECT_EQ(bits(out), bits(read_f32(c.name + ".nested.deq.f32")));
  }
}

// The row form (DType::NF4) dequantizes to the same bits, on the SIMD and the scalar path.
TEST(Nf4, RowBlocksMatchFlatDequantize) {
  const std::vector<float> x = read_f32("matrix_300x64.in.f32");
  const int64_t rows = 150, cols = 128, n = rows * cols;
  std::vector<uint8_t> packed(static_cast<size_t>(n / 2));
  std::vector<float> absmax(static_cast<size_t>(n / nf4::kBlock));
  nf4::quantize(x.data(), n, packed.data(), absmax.data());
  const std::vector<uint8_t> blocks = nf4::row_blocks(packed.data(), absmax.data(), rows, cols);
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), n / nf4::kBlock * nf4::kRowBlockBytes);
  std::vector<float> flat(static_cast<size_t>(n)), simd(static_cast<size_t>(n)), scalar(static_cast<size_t>(n));
  nf4::dequantize(packed.data(), absmax.data(), flat.data(), n);
  nf4::dequantize_blocks(blocks.data(), simd.data(), n);
  nf4::dequantize_blocks_scalar(blocks.data(), scalar.data(), n);
  EXPECT_EQ(bits(simd), bits(flat));
  EXPECT_EQ(bits(scalar), bits(flat));
  // dot_blocks: fused, so only the fp32 summation order differs from dequantize-then-dot.
  // Bound: n * eps * sum |w x| (standard recursive-summation bound, eps = 2^-24).
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(cols));
  for (float& f : v) f = nd(rng);
  for (int64_t r = 0; r < rows; r += 37) {
    double exact = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += static_cast<double>(flat[static_cast<size_t>(r * cols + c)]) * static_cast<double>(v[static_cast<size_t>(c)]);
      mag += std::abs(static_cast<double>(flat[static_cast<size_t>(r * cols + c)]) * static_cast<double>(v[static_cast<size_t>(c)]));
    }
    const float got = nf4::dot_blocks(blocks.data() + r * cols / nf4::kBlock * nf4::kRowBlockBytes, v.data(), cols);
    EXPECT_NEAR(static_cast<double>(got), exact, static_cast<double>(cols) * 0x1p-24 * mag);
  }
}

// torch.mean's summation order over lengths that exercise every level of ATen's cascade
// (against a double-precision mean: the order only moves the last bits, so the bound is
// n * eps * mean|x|; the exact bit pattern is pinned by the fixtures' offsets above).
TEST(Nf4, TorchMeanIsAMean) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 33, 64, 300, 5000, 20000}) {
    std::vector<float> x(static_cast<size_t>(n));
    double s = 0;
    for (float& f : x) { f = u(rng); s += static_cast<double>(f); }
    EXPECT_NEAR(static_cast<double>(nf4::torch_mean(x.data(), n)), s / static_cast<double>(n),
                static_cast<double>(n) * 0x1p-24);
  }
}

}  // namespace
}  // namespace medtune
