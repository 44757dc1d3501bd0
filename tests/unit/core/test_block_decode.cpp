// gpu/block_decode.h, the per-element decode the GPU kernels use (gpu/decode.h), run here on the
// CPU: every element of every block type must equal the CPU's dequantize_row (ggml's reference)
// bit for bit, on gguf-py's fixture blocks and on random blocks. This checks the kernels' block
// indexing (which byte, which nibble, which scale) on machines without a GPU; what only a GPU can
// show (its f16 conversion, its rounding) is the op tests' business (tests/gpu/cases_dequantize.cpp).
// Tolerance: bit-exact, for the reason block_decode.h gives (exact products, one rounding).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/kquant_layout.h"
#include "core/nf4.h"
#include "core/quant.h"
#include "gpu/block_decode.h"

namespace medtune::quant_detail {
void dequantize_row_scalar(DType t, const void* src, float* dst, int64_t n);
}  // namespace medtune::quant_detail

namespace medtune {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/quant/";

struct HostF16 {
  float operator()(uint16_t bits) const { return f16_to_f32(bits); }
};
struct HostU32 {
  float operator()(uint32_t bits) const {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

float decode(DType t, const uint8_t* src, int64_t i) {
  switch (t) {
    case DType::Q8_0: return block_decode::q8_0(src, i, HostF16{});
    case DType::Q4_0: return block_decode::q4_0(src, i, HostF16{});
    case DType::Q4_1: return block_decode::q4_1(src, i, HostF16{});
    case DType::Q4_K: return block_decode::q4_k(src, i, HostF16{});
    case DType::Q6_K: return block_decode::q6_k(src, i, HostF16{});
    case DType::Q5_0: return block_decode::q5_0(src, i, HostF16{});
    case DType::Q5_1: return block_decode::q5_1(src, i, HostF16{});
    case DType::Q5_K: return block_decode::q5_k(src, i, HostF16{});
    case DType::Q2_K: return block_decode::q2_k(src, i, HostF16{});
    case DType::Q3_K: return block_decode::q3_k(src, i, HostF16{});
    case DType::IQ4_NL: return block_decode::iq4_nl(src, i, HostF16{});
    case DType::IQ4_XS: return block_decode::iq4_xs(src, i, HostF16{});
    case DType::NF4: return block_decode::nf4(src, i, nf4::kCode.data(), HostU32{});
    default: ADD_FAILURE() << "no block decode for " << dtype_name(t); return 0.0f;
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element-by-element decode vs the whole-row reference; reports the first mismatch.
void expect_same_bits(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& want,
                      const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = decode(t, blocks.data(), static_cast<int64_t>(i));
    if (bits(got) != bits(want[i])) {
      ADD_FAILURE() << what << " " << dtype_name(t) << ": element " << i << " decodes to " << got
                    << ", the CPU gives " << want[i];
      return;
    }
  }
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// An f16 that is finite: exponent all ones (Inf/NaN) loses its top exponent bit.
void make_f16_finite(uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if ((h & 0x7C00) == 0x7C00) h = static_cast<uint16_t>(h & ~0x4000);
  std::memcpy(p, &h, 2);
}

// Random blocks with finite scales (a NaN scale would make NaN outputs, whose bits prove nothing).
std::vector<uint8_t> random_blocks(DType t, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(t == DType::NF4 ? n / nf4::kBlock * nf4::kRowBlockBytes
                                                             : dtype_row_bytes(t, n)));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  const size_t bb = t == DType::NF4 ? nf4::kRowBlockBytes : static_cast<size_t>(dtype_block_bytes(t));
  for (size_t at = 0; at < b.size(); at += bb) {
    switch (t) {
      case DType::Q8_0:
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::IQ4_NL:
      case DType::IQ4_XS: make_f16_finite(&b[at]); break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q4_K:
      case DType::Q5_K: make_f16_finite(&b[at]); make_f16_finite(&b[at + 2]); break;
      case DType::Q6_K: make_f16_finite(&b[at + 208]); break;
      case DType::Q2_K: make_f16_finite(&b[at + 80]); make_f16_finite(&b[at + 82]); break;
      case DType::Q3_K: make_f16_finite(&b[at + 108]); break;
      case DType::NF4: {
        const float absmax = static_cast<float>(b[at + 1] + 1) / 64.0f;
        std::memcpy(&b[at], &absmax, 4);
        break;
      }
      default: break;
    }
  }
  return b;
}

const DType kGgmlTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                            DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                            DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

}  // namespace

TEST(BlockDecode, EqualsGgufPyOnTheFixtureBlocks) {
  for (DType t : kGgmlTypes) {
    const std::vector<uint8_t> blocks = read_bytes(kDir + std::string(dtype_name(t)) + ".blocks");
    const std::vector<uint8_t> raw = read_bytes(kDir + std::string(dtype_name(t)) + ".f32");
    std::vector<float> want(raw.size() / 4);
    std::memcpy(want.data(), raw.data(), raw.size());
    ASSERT_EQ(static_cast<int64_t>(blocks.size()), dtype_row_bytes(t, static_cast<int64_t>(want.size())));
    expect_same_bits(t, blocks, want, "fixture");
  }
}

TEST(BlockDecode, EqualsDequantizeRowOnRandomBlocks) {
  constexpr int64_t kN = 256 * 40;  // 40 super-blocks; 320 legacy blocks
  for (DType t : kGgmlTypes) {
    const std::vector<uint8_t> blocks = random_blocks(t, kN, 1000 + static_cast<uint64_t>(t));
    std::vector<float> want(static_cast<size_t>(kN));
    quant_detail::dequantize_row_scalar(t, blocks.data(), want.data(), kN);
    expect_same_bits(t, blocks, want, "random");
  }
}

// The device's packed copy of ggml's IQ4_NL table is the host's.
TEST(BlockDecode, Iq4nlTableIsTheHosts) {
  for (int q = 0; q < 16; ++q)
    EXPECT_EQ(block_decode::iq4nl_value(q), kquant::kIq4nlValues[q]) << q;
}

TEST(BlockDecode, Nf4EqualsTheCpuRowBlocks) {
  constexpr int64_t kN = nf4::kBlock * 37;
  const std::vector<uint8_t> blocks = random_blocks(DType::NF4, kN, 77);
  std::vector<float> want(static_cast<size_t>(kN));
  nf4::dequantize_blocks_scalar(blocks.data(), want.data(), kN);
  expect_same_bits(DType::NF4, blocks, want, "random");
}

// The test above must be able to fail: a decoder that reads the wrong nibble or scale of a
// k-quant is caught (one flipped bit in a scale byte of the second super-block changes elements).
TEST(BlockDecode, DetectsAChangedScaleInALaterSuperBlock) {
  constexpr int64_t kN = 512;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    std::vector<uint8_t> blocks = random_blocks(t, kN, 5);
    std::vector<float> want(static_cast<size_t>(kN));
    quant_detail::dequantize_row_scalar(t, blocks.data(), want.data(), kN);
    const size_t at = t == DType::Q6_K   ? 192
                      : t == DType::Q2_K ? 0
                      : t == DType::Q3_K ? 96
                                         : 4;  // Q4_K, Q5_K; IQ4_XS's scales_l
    const size_t scale_byte = static_cast<size_t>(dtype_block_bytes(t)) + at;
    blocks[scale_byte] ^= 1;  // sub-block 0's scale of the second super-block
    int differ = 0;
    for (int64_t i = 0; i < kN; ++i) differ += bits(decode(t, blocks.data(), i)) != bits(want[static_cast<size_t>(i)]);
    EXPECT_GT(differ, 0) << dtype_name(t);
  }
}

}  // namespace medtune
