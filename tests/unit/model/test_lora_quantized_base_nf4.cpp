// LoRA over a quantized frozen base: the loss and every adapter gradient through the quantized
// path (weights dequantized block by block inside the matmuls, forward and backward to the
// activations) equal those of the same model with the base stored as its dequantized fp32 values.
// Bases: NF4 (quantized at load, QLoRA), and GGUF Q8_0 / Q4_0 / Q4_1 blocks (the LoRA-on-GGUF
// path). Model: tests/fixtures/nf4/tiny_llama/base (dims multiples of 64).
// Tolerance: NMSE <= 1e-10, the project's bound for fp32 reductions of these sizes
// (tests/unit/ops/test_ops.cpp): only summation orders differ between the two paths.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/half.h"
#include "core/mapped_file.h"
#include "core/quant_write.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/train_step.h"
#include "support/buffers.h"

namespace medtune {
namespace {

const std::string kBase = MEDTUNE_SOURCE_DIR "/tests/fixtures/nf4/tiny_llama/base";

bool is_block_linear(const std::string& n) {
  return n.rfind("model.layers.", 0) == 0 && n.find("norm") == std::string::npos;
}

RawTensor owned_tensor(const std::string& name, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  RawTensor r;
  r.name = name;
  r.dtype = t;
  r.shape = std::move(shape);
  r.nbytes = static_cast<int64_t>(bytes.size());
  r.file = MappedFile::from_bytes(name, std::move(bytes));
  r.data = r.file->data();
  return r;
}

// Random but valid ggml blocks for a (rows, cols) matrix (weights' scale ~0.02).
std::vector<uint8_t> random_blocks(DType t, const float* w, int64_t rows, int64_t cols, std::mt19937& rng) {
  if (t == DType::Q8_0) return encode_f32(t, w, rows, cols);
  std::vector<uint8_t> out(static_cast<size_t>(dtype_row_bytes(t, rows * cols)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(0.001f, 0.01f);
  const int64_t bb = dtype_block_bytes(t);
  for (size_t b = 0; b < out.size(); b += static_cast<size_t>(bb)) {
    const uint16_t d = f32_to_f16(u(rng)), m = f32_to_f16(-8.0f * u(rng));
    std::memcpy(&out[b], &d, 2);
    size_t q = b + 2;
    if (t == DType::Q4_1) {
      std::memcpy(&out[b + 2], &m, 2);
      q += 2;
    }
    for (; q < b + static_cast<size_t>(bb); ++q) out[q] = static_cast<uint8_t>(byte(rng));
  }
  return out;
}

struct Grads {
  double loss = 0;
  std::vector<float> g;  // all dA then dB, concatenated
};

Grads lora_grads(model::LlamaModel& m) {
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                model::Proj::gate, model::Proj::up, model::Proj::down};
  model::LoraWeights lora = model::init_lora(m.config(), lc, 5);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (auto& layer : lora.layers)
    for (auto& ll : layer)
      for (float& b : ll.B) b = nd(rng);  // B = 0 at init would leave dA = 0
  m.set_lora(&lora);
  model::TrainBatch batch;
  batch.B = 2;
  batch.T = 7;
  batch.ids = {3, 17, 5, 42, 9, 1, 30, 127, 64, 8, 8, 2, 99, 100};
  batch.targets.assign(14, -100);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t + 1 < 7; ++t) batch.targets[static_cast<size_t>(b * 7 + t)] = batch.ids[static_cast<size_t>(b * 7 + t + 1)];
  model::TrainOptions opt;
  opt.loss_scale = 1.0 / 12.0;
  lora.zero_grad();
  Grads g;
  g.loss = model::forward_backward(m, lora, batch, opt).loss_sum;
  for (auto& layer : lora.layers)
    for (auto& ll : layer) {
      g.g.insert(g.g.end(), ll.dA.begin(), ll.dA.end());
      g.g.insert(g.g.end(), ll.dB.begin(), ll.dB.end());
    }
  m.set_lora(nullptr);
  return g;
}

// The quantized model, and a twin whose block linears are F32 copies of its dequantized weights.
void check(DType t) {
  SCOPED_TRACE(std::string(dtype_name(t)));
  io::Checkpoint qck = io::open_checkpoint(kBase);
  std::mt19937 rng(11);
  if (t != DType::NF4) {
    for (auto& [name, rt] : qck.tensors) {
      if (!is_block_linear(name)) continue;
      const auto* w = reinterpret_cast<const float*>(rt.data);
      rt = owned_tensor(name, t, rt.shape, random_blocks(t, w, rt.shape[0], rt.shape[1], rng));
    }
  }
  model::LlamaModel quant(std::move(qck), t == DType::NF4 ? model::WeightQuant::kNf4 : model::WeightQuant::kNone);
  io::Checkpoint fck = io::open_checkpoint(kBase);
  const auto& qw = quant.weights();
  for (size_t l = 0; l < qw.layers.size(); ++l) {
    const auto& L = qw.layers[l];
    const std::pair<const char*, const ops::StoredMatrix*> mats[] = {
        {"self_attn.q_proj", &L.q}, {"self_attn.k_proj", &L.k}, {"self_attn.v_proj", &L.v}, {"self_attn.o_proj", &L.o},
        {"mlp.gate_proj", &L.gate}, {"mlp.up_proj", &L.up}, {"mlp.down_proj", &L.down}};
    for (const auto& [n, m] : mats) {
      ASSERT_EQ(m->dtype, t);
      std::vector<uint8_t> bytes(static_cast<size_t>(m->rows * m->cols * 4));
      ops::dequantize_rows(reinterpret_cast<float*>(bytes.data()), *m, 0, m->rows);
      const std::string name = "model.layers." + std::to_string(l) + "." + n + ".weight";
      fck.tensors[name] = owned_tensor(name, DType::F32, {m->rows, m->cols}, std::move(bytes));
    }
  }
  model::LlamaModel f32(std::move(fck));
  const Grads a = lora_grads(quant), b = lora_grads(f32);
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(b.loss));  // fp32 sums of 12 tokens' losses
  ASSERT_EQ(a.g.size(), b.g.size());
  double norm = 0;
  for (float v : b.g) norm += static_cast<double>(v) * static_cast<double>(v);
  EXPECT_GT(norm, 0.0);
  EXPECT_LE(testing::nmse(a.g.data(), b.g.data(), a.g.size()), 1e-10);
}

TEST(LoraQuantizedBaseNf4, Nf4GradientsMatchDequantizedBase) { check(DType::NF4); }
TEST(LoraQuantizedBaseNf4, Q4_1GradientsMatchDequantizedBase) { check(DType::Q4_1); }
TEST(LoraQuantizedBaseNf4, Q4_0GradientsMatchDequantizedBase) { check(DType::Q4_0); }
TEST(LoraQuantizedBaseNf4, Q8_0GradientsMatchDequantizedBase) { check(DType::Q8_0); }

}  // namespace
}  // namespace medtune
