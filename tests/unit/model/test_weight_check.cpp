// The NaN/Inf weight check (model/weight_check.h): the first non-finite element is found in every
// stored type, named by tensor (with the GGUF name when the file has its own) and block, and a
// clean checkpoint passes. Tensors are built in memory: bytes as the file would hold them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/weight_check.h"

namespace medtune::model {
namespace {

struct Owned {
  std::vector<std::vector<uint8_t>> buffers;
  io::Checkpoint ckpt;
  void add(const std::string& hf, const std::string& file_name, DType t, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes) {
    buffers.push_back(std::move(bytes));
    RawTensor r;
    r.name = file_name;
    r.dtype = t;
    r.shape = std::move(shape);
    r.data = buffers.back().data();
    r.nbytes = static_cast<int64_t>(buffers.back().size());
    ckpt.tensors[hf] = r;
  }
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Q8_0 blocks of 32: f16 scale then 32 int8; every scale 1.0 except `bad_block`'s, which is +Inf.
std::vector<uint8_t> q8_0_bytes(int64_t blocks, int64_t bad_block) {
  std::vector<uint8_t> b(static_cast<size_t>(blocks * 34), 0);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint16_t d = i == bad_block ? uint16_t{0x7C00} : uint16_t{0x3C00};  // +Inf : 1.0 in f16
    std::memcpy(b.data() + i * 34, &d, 2);
    for (int k = 0; k < 32; ++k)
      b[static_cast<size_t>(i * 34 + 2 + k)] = static_cast<uint8_t>(k % 5);
  }
  return b;
}

TEST(WeightCheck, CleanCheckpointPasses) {
  Owned o;
  o.ckpt.path = "clean.gguf";
  o.add("model.norm.weight", "output_norm.weight", DType::F32, {8},
        f32_bytes(std::vector<float>(8, 1.0f)));
  o.add("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", DType::Q8_0, {2, 64},
        q8_0_bytes(4, -1));
  EXPECT_FALSE(find_nonfinite_weight(o.ckpt).has_value());
  EXPECT_NO_THROW(check_weights_finite(o.ckpt));
}

TEST(WeightCheck, NanNormWeightIsNamedWithItsElement) {
  Owned o;
  o.ckpt.path = "m";
  std::vector<float> w(16, 1.0f);
  w[11] = std::numeric_limits<float>::quiet_NaN();
  w[13] = std::numeric_limits<float>::infinity();
  o.add("model.norm.weight", "model.norm.weight", DType::F32, {16}, f32_bytes(w));
  const auto bad = find_nonfinite_weight(o.ckpt);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->tensor, "model.norm.weight");
  EXPECT_EQ(bad->element, 11);  // the first, not the Inf after it
  EXPECT_EQ(bad->block, -1);
  try {
    check_weights_finite(o.ckpt);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("m: tensor 'model.norm.weight' holds NaN at element 11"),
              std::string::npos)
        << e.what();
  }
}

TEST(WeightCheck, InfScaleInQuantizedBlockIsNamedByGgufNameAndBlock) {
  Owned o;
  o.ckpt.path = "model.gguf";
  // (3, 64): 6 blocks of 32; block 4 = row 2, elements 128..159.
  o.add("model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight", DType::Q8_0, {3, 64},
        q8_0_bytes(6, 4));
  const auto bad = find_nonfinite_weight(o.ckpt);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->block, 4);
  EXPECT_EQ(bad->element, 128);  // Inf * q: NaN where q = 0 (element 128), Inf elsewhere
  try {
    check_weights_finite(o.ckpt);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tensor 'blk.1.ffn_up.weight' (model.layers.1.mlp.up_proj.weight)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("Q8_0 block 4"), std::string::npos) << msg;
  }
}

// NF4 (bitsandbytes checkpoints): an Inf absmax in block 1 of a 128-wide row.
TEST(WeightCheck, InfAbsmaxInNf4BlockIsFound) {
  Owned o;
  o.ckpt.path = "bnb";
  std::vector<uint8_t> blocks(2 * 36, 0xFF);  // codes 15 (+1.0) everywhere
  const float one = 1.0f, inf = std::numeric_limits<float>::infinity();
  std::memcpy(blocks.data(), &one, 4);
  std::memcpy(blocks.data() + 36, &inf, 4);
  o.add("model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.weight", DType::NF4,
        {1, 128}, blocks);
  const auto bad = find_nonfinite_weight(o.ckpt);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->element, 64);
  EXPECT_EQ(bad->block, 1);
  EXPECT_TRUE(std::isinf(bad->value));
}

TEST(WeightCheck, F16AndBf16InfAreFound) {
  Owned o;
  o.ckpt.path = "m";
  std::vector<uint8_t> f16(2 * 40, 0);
  const uint16_t ninf = 0xFC00;  // -Inf in f16
  std::memcpy(f16.data() + 2 * 37, &ninf, 2);
  o.add("a.weight", "a.weight", DType::F16, {40}, f16);
  std::vector<uint8_t> bf16(2 * 8, 0);
  o.add("b.weight", "b.weight", DType::BF16, {8}, bf16);
  const auto bad = find_nonfinite_weight(o.ckpt);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->tensor, "a.weight");
  EXPECT_EQ(bad->element, 37);
  EXPECT_TRUE(std::isinf(bad->value) && bad->value < 0);
}

}  // namespace
}  // namespace medtune::model
