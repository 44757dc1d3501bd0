// The KV cache's element type: half on the CPU's int8 route (backend.h, kv_type), fp32 elsewhere,
// and what the half cache must keep: a token's logits do not depend on how its text was cut into
// calls (the fixed-order attention reads half keys and values exactly as their widened values).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace medtune {
namespace {

const std::string kGqa = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

TEST(KvCache, ElementTypeFollowsTheBackend) {
  struct Case {
    backend::Backend* be;
    DType type;
  };
  for (const Case& c : {Case{&backend::cpu(), DType::F32}, Case{&backend::cpu_bf16(), DType::F32},
                        Case{&backend::batch_invariant(backend::cpu()), DType::F32},
                        Case{&backend::cpu_int8(), DType::F16},
                        Case{&backend::batch_invariant(backend::cpu_int8()), DType::F16}}) {
    model::LlamaModel m(io::open_checkpoint(kGqa), model::WeightQuant::kNone, *c.be);
    const model::KvCache cache = m.make_cache(2, 10);
    EXPECT_EQ(cache.type, c.type) << c.be->describe();
    const ModelConfig& cfg = m.config();
    const int64_t elems = 2 * cfg.num_hidden_layers * 2 * 10 * cfg.num_key_value_heads * cfg.head_dim;
    EXPECT_EQ(cache.bytes(), elems * (c.type == DType::F16 ? 2 : 4)) << c.be->describe();
  }
}

TEST(KvCache, SlicesCountElementsAndRefuseTheOtherType) {
  model::LlamaModel fp32(io::open_checkpoint(kGqa));
  model::KvCache half(fp32.config(), 1, 4, backend::cpu(), DType::F16);
  const model::KvSlice l1 = half.layer_k(1);
  EXPECT_EQ(static_cast<char*>(l1.data) - reinterpret_cast<char*>(half.k.data()), half.layer_elems() * 2);
  EXPECT_EQ(static_cast<char*>(l1.at(3).data) - static_cast<char*>(l1.data), 6);
  EXPECT_THROW(l1.f32(), Internal);
  EXPECT_NO_THROW(l1.f16());
  EXPECT_THROW(model::KvCache(fp32.config(), 1, 4, backend::cpu(), DType::BF16), Internal);
  // The fp32 paths' attention (OpenBLAS, training) never reads a half cache.
  model::KvCache wrong = fp32.make_cache(1, 4, DType::F16);
  std::vector<float> logits;
  EXPECT_THROW(fp32.forward(model::Batch{1, 2, {3, 5}, {}}, wrong, logits), Internal);
}

// On the server's int8 backend (half cache; the fixture's fp32 weights take its batch-invariant
// fp32 kernel, quantized ones the int8 kernels, both independent of the call's shape): a
// 14-token text read in one call, as a 6-token prompt then one token per call, and as a 6-token
// prompt then chunks of 3 and 5: every logit the same bits. Against the same backend with an fp32
// cache the logits differ (the half cache is what ran) within one half rounding of their scale:
// a key's or value's relative error is u = 2^-11 and this 2-layer fixture does not amplify it
// (measured: 0.36 u).
TEST(KvCache, HalfCacheLogitsDoNotDependOnHowTheTextIsCut) {
  model::LlamaModel m(io::open_checkpoint(kGqa), model::WeightQuant::kNone,
                      backend::batch_invariant(backend::cpu_int8()));
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> ids{5, 9, 14, 2, 7, 1, 3, 11, 8, 4, 6, 13, 10, 12};
  const int64_t S = static_cast<int64_t>(ids.size());
  const auto run = [&](const std::vector<int64_t>& cuts, DType type) {
    model::KvCache cache = m.make_cache(1, S, type);
    std::vector<float> all;
    int64_t t0 = 0;
    for (const int64_t len : cuts) {
      model::Batch b{1, len, std::vector<int32_t>(ids.begin() + t0, ids.begin() + t0 + len), {}};
      std::vector<float> logits;
      m.forward(b, cache, logits);
      all.insert(all.end(), logits.begin(), logits.end());
      t0 += len;
    }
    EXPECT_EQ(t0, S);
    return all;
  };
  const std::vector<float> whole = run({S}, DType::F16);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), S * V);
  const std::vector<float> decoded = run({6, 1, 1, 1, 1, 1, 1, 1, 1}, DType::F16);
  const std::vector<float> chunks = run({6, 3, 5}, DType::F16);
  const std::vector<float> fp32_cache = run({S}, DType::F32);
  int64_t differ_decoded = 0, differ_chunks = 0, differ_fp32 = 0;
  double scale = 0, largest = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    differ_decoded += decoded[i] != whole[i];
    differ_chunks += chunks[i] != whole[i];
    differ_fp32 += fp32_cache[i] != whole[i];
    scale = std::fmax(scale, std::fabs(static_cast<double>(fp32_cache[i])));
    const double d = static_cast<double>(whole[i]) - static_cast<double>(fp32_cache[i]);
    largest = std::fmax(largest, std::fabs(d));
  }
  EXPECT_EQ(differ_decoded, 0);
  EXPECT_EQ(differ_chunks, 0);
  EXPECT_GT(differ_fp32, 0) << "the half cache must be what ran";
  EXPECT_LE(largest, 0x1p-11 * scale);
}

}  // namespace
}  // namespace medtune
