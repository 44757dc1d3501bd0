// NF4 base weights at the model level (tests/fixtures/nf4/tiny_llama from
// tools/make_nf4_fixtures.py --tiny-checkpoint: a random tiny Llama in F32, the same loaded by
// transformers with load_in_4bit (nf4, double quantization) on the CPU and saved by
// save_pretrained, and that quantized model's logits):
//   - quantizing the F32 base at load gives the very bytes read back from bitsandbytes' file;
//   - medtune's logits over the bnb checkpoint match transformers+bitsandbytes';
//   - unsupported quantizations and bases are refused with a message naming what was found.
#include <unistd.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"

namespace medtune {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = MEDTUNE_SOURCE_DIR "/tests/fixtures/nf4/tiny_llama";

std::vector<const ops::StoredMatrix*> linears(const model::ModelWeights& w) {
  std::vector<const ops::StoredMatrix*> out;
  for (const auto& l : w.layers)
    for (const ops::StoredMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) out.push_back(m);
  return out;
}

TEST(ModelNf4, QuantizeAtLoadEqualsBitsandbytesCheckpoint) {
  model::LlamaModel ours(io::open_checkpoint(kRoot + "/base"), model::WeightQuant::kNf4);
  model::LlamaModel bnb(io::open_checkpoint(kRoot + "/bnb"));
  const auto a = linears(ours.weights()), b = linears(bnb.weights());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(a[i]->dtype, DType::NF4);
    ASSERT_EQ(b[i]->dtype, DType::NF4);
    ASSERT_EQ(a[i]->rows, b[i]->rows);
    ASSERT_EQ(a[i]->cols, b[i]->cols);
    EXPECT_EQ(0, std::memcmp(a[i]->data, b[i]->data, static_cast<size_t>(a[i]->rows * a[i]->row_bytes())));
  }
  // bitsandbytes leaves embeddings and lm_head alone (transformers skips lm_head): so do we
  EXPECT_EQ(ours.weights().embed.dtype, DType::F32);
  EXPECT_EQ(ours.weights().lm_head.dtype, DType::F32);
  EXPECT_EQ(bnb.weights().lm_head.dtype, DType::F32);
}

TEST(ModelNf4, LogitsMatchTransformersWithBitsandbytes) {
  model::LlamaModel m(io::open_checkpoint(kRoot + "/bnb"));
  const std::vector<int32_t> ids = {3, 17, 5, 42, 9, 1, 30, 127, 64};  // ids.json
  const auto got = m.logits(model::Batch{1, static_cast<int64_t>(ids.size()), ids, {}});
  std::ifstream f(kRoot + "/logits.f32", std::ios::binary);
  std::vector<float> want(got.size());
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4)));
  // Same weights (bit for bit, above), fp32 both sides, different summation orders: the
  // project's fp32 bound, max |dlogit| / max |logit| <= 1e-4 (test_real_model.cpp).
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LE(num / den, 1e-4) << num << " / " << den;
}

// A copy of the bnb checkpoint with config.json edited, for the refusals.
std::string edited_copy(const std::string& name, const std::string& from, const std::string& to) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("nf4_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kRoot + "/bnb/model.safetensors", dir / "model.safetensors");
  std::ifstream in(kRoot + "/bnb/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cfg = ss.str();
  const auto at = cfg.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) cfg.replace(at, from.size(), to);
  std::ofstream(dir / "config.json") << cfg;
  return dir.string();
}

std::string error_of(const std::string& dir) {
  try {
    io::open_checkpoint(dir);
  } catch (const BadInput& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelNf4, UnsupportedQuantizationNamesWhatItFound) {
  const std::string gptq = error_of(edited_copy("gptq", "\"quant_method\": \"bitsandbytes\"", "\"quant_method\": \"gptq\""));
  EXPECT_NE(gptq.find("'gptq' is not supported"), std::string::npos) << gptq;
  EXPECT_NE(gptq.find("supported: bitsandbytes 4-bit nf4"), std::string::npos) << gptq;
  const std::string fp4 = error_of(edited_copy("fp4", "\"bnb_4bit_quant_type\": \"nf4\"", "\"bnb_4bit_quant_type\": \"fp4\""));
  EXPECT_NE(fp4.find("found bitsandbytes 4-bit fp4"), std::string::npos) << fp4;
  const std::string int8 = error_of(edited_copy("int8", "\"load_in_8bit\": false", "\"load_in_8bit\": true"));
  EXPECT_NE(int8.find("8-bit"), std::string::npos) << int8;
}

TEST(ModelNf4, QuantizedBaseCannotBeRequantized) {
  // the bnb checkpoint's linears are already NF4: quantize-at-load names the tensor and dtype
  try {
    model::LlamaModel m(io::open_checkpoint(kRoot + "/bnb"), model::WeightQuant::kNf4);
    ADD_FAILURE() << "no error";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.weight' has dtype NF4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model::parse_weight_quant("int4", "--base-quant"), BadInput);
  EXPECT_EQ(model::parse_weight_quant("nf4", "--base-quant"), model::WeightQuant::kNf4);
}

}  // namespace
}  // namespace medtune
