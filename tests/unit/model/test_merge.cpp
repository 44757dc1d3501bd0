// LoRA merge and export (model/merge.h, export_hf.h, export_gguf.h) on the tiny HF fixtures:
// merge math against fp64 values numpy computed from the committed files
// (tests/fixtures/export/merge_llama_gqa.safetensors, tools/check_export.py), rounding once, and
// every exported file read back by medtune's own readers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor_convert.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/export_gguf.h"
#include "model/export_hf.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "model/merge.h"

namespace medtune::model {
namespace {

namespace fs = std::filesystem;
const std::string kHf = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/hf/";
const std::string kExport = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/export/";

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("medtune_merge_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& n) const { return (path_ / n).string(); }

 private:
  fs::path path_;
};

LoraWeights adapter_for(const std::string& fixture, const ModelConfig& c) {
  const std::string dir = kHf + fixture + "/adapter_init";
  return lora_from_peft(io::read_peft_adapter(dir), c, dir);
}

std::vector<float> logits_of(io::Checkpoint ck, LoraWeights* lora) {
  LlamaModel m(std::move(ck));
  m.set_lora(lora);
  Batch b;
  for (int32_t id : {1, 5, 17, 42, 99, 3, 64, 7})
    b.ids.push_back(static_cast<int32_t>(id % m.config().vocab_size));  // llama_tied has V = 97
  b.T = static_cast<int64_t>(b.ids.size());
  return m.logits(b);
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return d;
}

// W + s*B*A formed in fp64 by medtune equals numpy's float64 result up to fp64 summation order:
// r + 2 roundings of at most 2^-53 of the magnitude |W| + s*sum_k |B_ok A_ki| each (r = 4 here,
// so 8 * 2^-53 * magnitude bounds the difference).
// An adapter holding NaN (a diverged run's) is refused by module and element when it is bound to
// the model, instead of producing NaN logits (issue #18, item 5).
TEST(Merge, NonFiniteAdapterIsRefusedByModule) {
  const std::string dir = kHf + "llama_gqa/adapter_init";
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  io::PeftAdapter a = io::read_peft_adapter(dir);
  ASSERT_FALSE(a.pairs.empty());
  a.pairs[1].B[2] = std::nanf("");
  try {
    lora_from_peft(a, ck.config, dir);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir + ": module '" + a.pairs[1].module + "': lora_B holds NaN at element 2"), std::string::npos)
        << msg;
  }
}

// A merge whose values a narrow type cannot hold is refused by tensor and element instead of being
// written as Inf (an adapter from a run that diverged made f16 exports all Inf).
TEST(Merge, OverflowingMergeIsRefusedNotWrittenAsInf) {
  TempDir tmp;
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  LoraWeights lora = adapter_for("llama_gqa", ck.config);
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      for (float& b : ll.B) b *= 1e9f;
  try {
    export_merged_hf(ck, &lora, tmp / "f16", DType::F16);
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("after the merge, which F16 cannot hold"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor 'model.layers.0."), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(export_merged_hf(ck, &lora, tmp / "f32", DType::F32));
  EXPECT_THROW(export_merged_gguf(ck, &lora, tmp / "q8.gguf", DType::Q8_0, nullptr), BadInput);
}

TEST(Merge, MatchesFp64ReferenceFromCommittedFiles) {
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  const LoraWeights lora = adapter_for("llama_gqa", ck.config);
  const io::SafetensorsFile ref = io::read_safetensors(kExport + "merge_llama_gqa.safetensors");
  ASSERT_EQ(ref.tensors.size(), 14u);  // 7 targets x 2 layers
  const double s = lora.config.scaling();
  EXPECT_EQ(s, 2.0);
  for (const auto& [name, t] : ref.tensors) {
    const MergedTensor m = merge_tensor(ck, &lora, name);
    const std::vector<double> want = tensor_to_f64(t);
    ASSERT_EQ(m.shape, t.shape) << name;
    const std::vector<float> w = tensor_to_f32(ck.tensors.at(name));
    // Which projection: find its LoraLinear by the module path.
    const LoraLinear* l = nullptr;
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int p = 0; p < kNumProj; ++p)
        if (proj_module_path(layer, static_cast<Proj>(p)) + ".weight" == name) l = &lora.at(layer, static_cast<Proj>(p));
    ASSERT_NE(l, nullptr) << name;
    double worst = 0;
    for (int64_t o = 0; o < l->out; ++o)
      for (int64_t i = 0; i < l->in; ++i) {
        const size_t k = static_cast<size_t>(o * l->in + i);
        double mag = std::fabs(static_cast<double>(w[k]));
        for (int64_t j = 0; j < l->r; ++j)
          mag += s * std::fabs(static_cast<double>(l->B[static_cast<size_t>(o * l->r + j)]) *
                               static_cast<double>(l->A[static_cast<size_t>(j * l->in + i)]));
        const double err = std::fabs(m.values[k] - want[k]);
        ASSERT_LE(err, 8 * std::ldexp(mag, -53)) << name << " [" << o << ", " << i << "]";
        worst = std::max(worst, std::fabs(m.values[k] - static_cast<double>(w[k])));
      }
    EXPECT_GT(worst, 1e-3) << name << ": the adapter changed nothing (fixture with B = 0?)";
  }
}

TEST(Merge, NoAdapterOrZeroBLeavesBaseExact) {
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  LoraWeights lora = adapter_for("llama_gqa", ck.config);
  for (auto& layer : lora.layers)
    for (auto& l : layer) std::fill(l.B.begin(), l.B.end(), 0.0f);
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  const std::vector<float> w = tensor_to_f32(ck.tensors.at(name));
  for (const LoraWeights* lp : {static_cast<const LoraWeights*>(nullptr), static_cast<const LoraWeights*>(&lora)}) {
    const MergedTensor m = merge_tensor(ck, lp, name);
    for (size_t k = 0; k < w.size(); ++k) ASSERT_EQ(m.values[k], static_cast<double>(w[k]));
  }
}

// Rounding once: 1 + 2^-11 + 2^-40 lies just above an f16 tie; through a plain fp32 cast it
// becomes the tie itself and rounds down to 1 (double rounding); once, it rounds up.
TEST(Merge, RoundsOnceToNarrowTypes) {
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(f16_to_f32(f32_to_f16(static_cast<float>(x))), 1.0f);
  EXPECT_EQ(f16_to_f32(round_once_f16(x)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(f16_to_f32(round_once_f16(-x)), -(1.0f + std::ldexp(1.0f, -10)));
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(static_cast<float>(y))), 1.0f);
  EXPECT_EQ(bf16_to_f32(round_once_bf16(y)), 1.0f + std::ldexp(1.0f, -7));
  // Exact values and exact ties are untouched by the round-to-odd step.
  EXPECT_EQ(f16_to_f32(round_once_f16(1.0 + std::ldexp(1.0, -11))), 1.0f);
  EXPECT_EQ(f16_to_f32(round_once_f16(0.5)), 0.5f);
  EXPECT_EQ(round_once_f32(1.0 + std::ldexp(1.0, -30)), 1.0f);
}

// medtune's logits with the merged HF directory equal medtune's with base + adapter up to fp32
// reassociation: (W + sBA)x against Wx + s B(Ax), ~(C + r) * 2^-24 relative per projection,
// below 1e-5 on these 2-layer models whose logits are O(1).
TEST(Merge, MergedHfDirectoryGivesAdapterLogits) {
  for (const std::string fixture : {"llama_gqa", "llama_tied", "qwen2_bias", "llama_attn_bias", "mistral"}) {
    TempDir tmp;
    io::Checkpoint ck = io::open_checkpoint(kHf + fixture + "/base");
    LoraWeights lora = adapter_for(fixture, ck.config);
    const auto rep = export_merged_hf(ck, &lora, tmp / "out", DType::F32);
    EXPECT_TRUE(fs::exists(tmp / "out/config.json")) << fixture;
    EXPECT_TRUE(fs::exists(tmp / "out/generation_config.json")) << fixture;
    const std::vector<float> want = logits_of(io::open_checkpoint(kHf + fixture + "/base"), &lora);
    const std::vector<float> base = logits_of(io::open_checkpoint(kHf + fixture + "/base"), nullptr);
    io::Checkpoint merged = io::open_checkpoint(tmp / "out");
    EXPECT_EQ(merged.config.tie_word_embeddings, ck.config.tie_word_embeddings) << fixture;
    EXPECT_EQ(merged.tensors.count("lm_head.weight"), ck.tensors.count("lm_head.weight")) << fixture;
    const std::vector<float> got = logits_of(std::move(merged), nullptr);
    EXPECT_LE(max_abs_diff(got, want), 1e-5) << fixture;
    EXPECT_GT(max_abs_diff(base, want), 1e-2) << fixture << ": the adapter must change the logits";
  }
}

// GGUF F16 of the merged model: every 2-D weight holds exactly the values of the F16 HF export
// (both rounded once from the same fp64 sums), q/k rows permuted as llama.cpp's converter does;
// norms (1-D) stay F32, equal to the F32 HF export. medtune's GGUF reader undoes the permutation,
// so the logits match base + adapter up to the f16 rounding of the weights: first order, each of
// the 7 matrices per layer and the head moves its output by at most 2^-11 relative, so
// max|d| <= (7L + 1) * 2^-11 * max|logit|.
TEST(Merge, GgufF16HoldsHfF16ValuesPermuted) {
  for (const std::string fixture : {"llama_gqa", "qwen2_bias", "llama_tied", "mistral", "llama_attn_bias", "llama3_rope"}) {
    TempDir tmp;
    const io::Checkpoint ck = io::open_checkpoint(kHf + fixture + "/base");
    LoraWeights lora = adapter_for(fixture, ck.config);
    export_merged_hf(ck, &lora, tmp / "hf16", DType::F16);
    export_merged_hf(ck, &lora, tmp / "hf32", DType::F32);
    export_merged_gguf(ck, &lora, tmp / "m.gguf", DType::F16);
    io::Checkpoint g = io::open_checkpoint(tmp / "m.gguf");
    const io::Checkpoint h16 = io::open_checkpoint(tmp / "hf16");
    const io::Checkpoint h32 = io::open_checkpoint(tmp / "hf32");
    EXPECT_EQ(g.qk_rows_permuted, fixture != "qwen2_bias");
    const ModelConfig& c = ck.config;
    for (const std::string& name : merged_tensor_names(ck)) {
      const RawTensor& t = g.tensors.at(name);
      const bool matrix = t.shape.size() == 2;
      ASSERT_EQ(t.dtype, matrix ? DType::F16 : DType::F32) << fixture << " " << name;
      const std::vector<float> hv = tensor_to_f32((matrix ? h16 : h32).tensors.at(name));
      std::vector<double> want(hv.begin(), hv.end());
      const bool q = name.find("q_proj") != std::string::npos, k = name.find("k_proj") != std::string::npos;
      if (g.qk_rows_permuted && (q || k)) {
        want = permute_rows_hf_to_gguf(want, q ? c.num_attention_heads : c.num_key_value_heads, c.head_dim,
                                       matrix ? t.shape[1] : 1);
      }
      const std::vector<float> got = tensor_to_f32(t);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(static_cast<double>(got[i]), want[i]) << fixture << " " << name << " " << i;
    }
    const std::vector<float> want = logits_of(io::open_checkpoint(kHf + fixture + "/base"), &lora);
    const std::vector<float> lg = logits_of(std::move(g), nullptr);
    const double L = static_cast<double>(c.num_hidden_layers);
    EXPECT_LE(max_abs_diff(lg, want), (7 * L + 1) * std::ldexp(max_abs(want), -11)) << fixture;
  }
}

// GGUF F32 of every fixture, read back by medtune's GGUF reader: the same logits as base +
// adapter from the Hugging Face directory, to the 1e-5 of the merged HF directory test above (the
// merged weights are the same fp32 values). This covers what only a GGUF carries: o_proj's bias
// under its llama.cpp name (llama_attn_bias) and llama3 rope scaling as rope_freqs.weight
// (llama3_rope, whose frequencies then differ from transformers' by a few fp32 roundings,
// test_rope_freq_factors.cpp).
TEST(Merge, GgufF32GivesBasePlusAdapterLogits) {
  for (const auto& entry : fs::directory_iterator(kHf)) {
    if (!fs::exists(entry.path() / "adapter_init")) continue;
    const std::string fixture = entry.path().filename().string();
    TempDir tmp;
    const io::Checkpoint ck = io::open_checkpoint(kHf + fixture + "/base");
    LoraWeights lora = adapter_for(fixture, ck.config);
    export_merged_gguf(ck, &lora, tmp / "m.gguf", DType::F32);
    io::Checkpoint g = io::open_checkpoint(tmp / "m.gguf");
    EXPECT_EQ(g.config.rope_freq_factors.empty(), ck.config.rope_scaling.type != "llama3") << fixture;
    EXPECT_EQ(g.tensors.count("model.layers.0.self_attn.o_proj.bias"),
              ck.tensors.count("model.layers.0.self_attn.o_proj.bias")) << fixture;
    const std::vector<float> want = logits_of(io::open_checkpoint(kHf + fixture + "/base"), &lora);
    EXPECT_LE(max_abs_diff(logits_of(std::move(g), nullptr), want), 1e-5) << fixture;
  }
}

// Q8_0: each weight is within half a quantization step (d/2, d = max|block| / 127, stored as f16)
// of the merged fp32 value; 1-D tensors stay F32 and rows that are not whole blocks fall back to
// F16 (down_proj here: 44 columns).
TEST(Merge, GgufQ8_0WithinHalfAStep) {
  TempDir tmp;
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  LoraWeights lora = adapter_for("llama_gqa", ck.config);
  const auto rep = export_merged_gguf(ck, &lora, tmp / "q.gguf", DType::Q8_0);
  const io::Checkpoint g = io::open_checkpoint(tmp / "q.gguf");
  EXPECT_EQ(g.tensors.at("model.layers.0.mlp.down_proj.weight").dtype, DType::F16);
  EXPECT_FALSE(rep.notes.empty());
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  const RawTensor& t = g.tensors.at(name);
  ASSERT_EQ(t.dtype, DType::Q8_0);
  const MergedTensor m = merge_tensor(ck, &lora, name);
  const std::vector<float> got = tensor_to_f32(t);
  for (size_t b = 0; b < got.size() / 32; ++b) {
    uint16_t dh;
    std::memcpy(&dh, t.data + b * 34, 2);
    const double d = f16_to_f32(dh);
    double amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(m.values[b * 32 + j]));
    // d is amax/127 rounded to f16 (relative error 2^-11), so the step used is d, not amax/127.
    for (size_t j = 0; j < 32; ++j) {
      const double q = static_cast<double>(got[b * 32 + j]) / d;
      ASSERT_LE(std::fabs(static_cast<double>(got[b * 32 + j]) - m.values[b * 32 + j]),
                d / 2 + std::fabs(q) * std::fabs(d - amax / 127) + 1e-7 * amax)
          << "block " << b << " elem " << j;
    }
  }
  // Logits: each weight moves by at most half a step, amax/254 < 2^-7.98 of its block's max; first
  // order over the 7 matrices per layer and the head (down_proj is F16 here, finer):
  // max|d| <= (7L + 1) * 2^-7.98 * max|logit|, L = 2. Measured: 0.10 of max|logit| 6.7 (1.5e-2).
  const std::vector<float> want = logits_of(io::open_checkpoint(kHf + "llama_gqa/base"), &lora);
  const double gap = max_abs_diff(logits_of(io::open_checkpoint(tmp / "q.gguf"), nullptr), want);
  EXPECT_LE(gap, 15.0 / 254.0 * max_abs(want));
}

// llama.cpp's LoRA GGUF: A as is, B with q/k rows permuted, alpha = scaling * r.
TEST(Merge, LoraGgufLayout) {
  TempDir tmp;
  const io::Checkpoint ck = io::open_checkpoint(kHf + "llama_gqa/base");
  LoraWeights lora = adapter_for("llama_gqa", ck.config);
  export_lora_gguf(ck, lora, tmp / "a.gguf");
  const io::GgufFile g = io::GgufFile::open(tmp / "a.gguf");
  EXPECT_EQ(g.get_string("general.type"), "adapter");
  EXPECT_EQ(g.get_string("adapter.type"), "lora");
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_float("adapter.lora.alpha"), 8.0);
  EXPECT_EQ(g.tensors().size(), 28u);
  const LoraLinear& l = lora.at(1, Proj::k);
  const RawTensor& a = g.tensors().at("blk.1.attn_k.weight.lora_a");
  const RawTensor& b = g.tensors().at("blk.1.attn_k.weight.lora_b");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{l.r, l.in}));
  EXPECT_EQ(b.shape, (std::vector<int64_t>{l.out, l.r}));
  EXPECT_EQ(tensor_to_f32(a), l.A);
  const std::vector<double> bd(l.B.begin(), l.B.end());
  const std::vector<double> perm = permute_rows_hf_to_gguf(bd, ck.config.num_key_value_heads, ck.config.head_dim, l.r);
  const std::vector<float> got = tensor_to_f32(b);
  for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(static_cast<double>(got[k]), perm[k]);
  EXPECT_EQ(tensor_to_f32(g.tensors().at("blk.0.ffn_down.weight.lora_b")), lora.at(0, Proj::down).B);
}

}  // namespace
}  // namespace medtune::model
