// The backend layer: device names, the registry, and the model's forward pass, scorer and
// generation run on a backend with memory of its own (simulated_device.h), checked against the CPU
// backend. The simulated device computes with the same CPU ops on copies of the data, so its
// outputs must equal the CPU backend's bit for bit: any difference means the model read memory it
// never wrote (NaN-poisoned), or weights that were not made resident.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/array.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/quant_write.h"
#include "io/checkpoint.h"
#include "io/peft_adapter.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "model/train_step.h"
#include "support/buffers.h"
#include "unit/model/simulated_device.h"

namespace medtune {
namespace {

const std::string kFixtures = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/";
const std::string kPeft = MEDTUNE_SOURCE_DIR "/tests/fixtures/peft/layers_to_transform";

// One for the process: layer scratch is kept per thread between calls (model/layer.cpp) and
// released on the backend that allocated it, which must outlive it, as a GPU backend does.
testing::SimulatedDevice& device() {
  static testing::SimulatedDevice d;
  return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Device, ParsesTheAcceptedFormsAndNamesTheOthers) {
  EXPECT_TRUE(backend::parse_device("cpu", "--device").is_cpu());
  EXPECT_EQ(backend::parse_device("gpu", "--device"), (backend::Device{backend::DeviceKind::kGpu, 0}));
  EXPECT_EQ(backend::parse_device("gpu:3", "--device"), (backend::Device{backend::DeviceKind::kGpu, 3}));
  EXPECT_EQ(backend::parse_device("gpu:3", "--device").str(), "gpu:3");
  for (const char* bad : {"", "GPU", "gpu:", "gpu:-1", "gpu:1x", "cuda", "gpu:99999999999"}) {
    try {
      backend::parse_device(bad, "--device");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("--device: '" + std::string(bad) + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu, gpu or gpu:N"), std::string::npos) << e.what();
    }
  }
}

TEST(Device, PrecisionAutoIsBf16OnAGpuAndFp32OnTheCpu) {
  const backend::Device cpu{}, gpu{backend::DeviceKind::kGpu, 0};
  EXPECT_EQ(backend::parse_precision("auto", cpu, "--precision"), backend::Precision::kFp32);
  EXPECT_EQ(backend::parse_precision("auto", gpu, "--precision"), backend::Precision::kBf16);
  EXPECT_EQ(backend::parse_precision("fp32", gpu, "--precision"), backend::Precision::kFp32);
  try {
    backend::parse_precision("fp16", cpu, "--precision");
    ADD_FAILURE() << "accepted fp16";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("--precision: 'fp16' is not a precision; use fp32, bf16, int8 or auto"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(&backend::for_device(cpu, backend::Precision::kBf16), &backend::cpu_bf16());
  EXPECT_EQ(backend::cpu_bf16().precision(), backend::Precision::kBf16);
  // bf16 has no batch-invariant kernels on the CPU: the server refuses it with several slots.
  try {
    backend::batch_invariant(backend::cpu_bf16());
    ADD_FAILURE() << "batch_invariant accepted bf16";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("--parallel 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(backend::cpu().precision(), backend::Precision::kFp32);
  EXPECT_EQ(backend::parse_precision("int8", cpu, "--precision"), backend::Precision::kInt8);
  EXPECT_EQ(backend::for_device(cpu, backend::Precision::kInt8).precision(), backend::Precision::kInt8);
  EXPECT_EQ(&backend::for_device(cpu, backend::Precision::kInt8), &backend::cpu_int8());
  try {
    backend::for_device(gpu, backend::Precision::kInt8);
    ADD_FAILURE() << "a GPU claimed int8";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("precision int8 runs on the CPU only"), std::string::npos) << e.what();
  }
}

TEST(Device, RegistryGivesTheCpuAndExplainsAMissingGpuBackend) {
  EXPECT_EQ(&backend::for_device({}), &backend::cpu());
  if (backend::gpu_compiled()) GTEST_SKIP() << "this build has a GPU backend";
  try {
    backend::for_device({backend::DeviceKind::kGpu, 0});
    ADD_FAILURE() << "a CPU-only build returned a GPU backend";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("-DMEDTUNE_GPU=cuda"), std::string::npos) << e.what();
  }
}

TEST(Array, ReusesItsBlockAndMovesOwnership) {
  testing::SimulatedDevice& d = device();
  const int64_t live = d.live_blocks();
  {
    backend::Array<float> a(d, 100);
    float* p = a.data();
    a.fit(d, 60);  // smaller: same block
    EXPECT_EQ(a.data(), p);
    EXPECT_EQ(a.size(), 60u);
    backend::Array<float> b = std::move(a);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(d.live_blocks(), live + 1);
    std::vector<float> host{1, 2, 3};
    b.upload(d, host);
    EXPECT_EQ(b.download(), host);
  }
  EXPECT_EQ(d.live_blocks(), live);  // freed
}

// Logits of every position, and of a few rows, on the CPU and on the simulated device.
void expect_same_forward(const std::string& fixture, model::WeightQuant quant = model::WeightQuant::kNone) {
  SCOPED_TRACE(fixture);
  model::LlamaModel cpu_model(io::open_checkpoint(fixture), quant);
  model::LlamaModel dev_model(io::open_checkpoint(fixture), quant, device());
  EXPECT_GT(device().resident_bytes(), 0) << "the weights were made resident at load";
  const model::Batch batch{2, 5, {3, 17, 5, 42, 9, 1, 30, 2, 8, 11}, {0, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
  const auto want = cpu_model.logits(batch);
  const auto got = dev_model.logits(batch);
  EXPECT_TRUE(same_bits(got, want));

  // Incremental decoding with a cache on the device, and a subset of rows (the last layer's
  // row-local part then runs on those rows only: gather and scatter).
  model::KvCache cc = cpu_model.make_cache(2, 7), dc = dev_model.make_cache(2, 7);
  std::vector<float> lc, ld;
  cpu_model.forward(batch, cc, lc, {9, 3, 4});
  dev_model.forward(batch, dc, ld, {9, 3, 4});
  EXPECT_TRUE(same_bits(ld, lc));
  const model::Batch next{2, 2, {4, 5, 6, 7}, {}};
  cpu_model.forward(next, cc, lc);
  dev_model.forward(next, dc, ld);
  EXPECT_TRUE(same_bits(ld, lc));
}

TEST(CpuBackend, LinearGroupEqualsOneCallPerMemberAtEveryPrecision) {
  // The int8 route fuses its members (ops::linear_forward_int8_group); a BF16 member between them
  // has no int8 kernel and is computed alone. Every backend must give each member's own call.
  constexpr int64_t kCols = 64;
  const DType types[3] = {DType::Q8_0, DType::BF16, DType::Q8_0};
  const int64_t rows[3] = {40, 24, 16};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ops::StoredMatrix> w;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> f = testing::random_normal(static_cast<size_t>(rows[i] * kCols), 50 + static_cast<uint64_t>(i));
    bytes.push_back(encode_f32(types[i], f.data(), rows[i], kCols));
  }
  for (int i = 0; i < 3; ++i) w.push_back({types[i], rows[i], kCols, bytes[static_cast<size_t>(i)].data()});
  const std::vector<float> bias = testing::random_normal(static_cast<size_t>(rows[1]), 60);
  const float* biases[3] = {nullptr, bias.data(), nullptr};
  std::vector<backend::Backend*> backends{&backend::cpu(), &backend::cpu_int8(), &backend::cpu_bf16(),
                                          &backend::batch_invariant(backend::cpu_int8())};
  for (backend::Backend* be : backends)
    for (int64_t N : {1, 6}) {
      const std::vector<float> x = testing::random_normal(static_cast<size_t>(N * kCols), 70 + static_cast<uint64_t>(N));
      std::vector<std::vector<float>> got(3), want(3);
      ops::LinearOut outs[3];
      for (size_t i = 0; i < 3; ++i) {
        got[i].assign(static_cast<size_t>(N * rows[i]), -1.0f);
        want[i].resize(got[i].size());
        be->linear_forward(want[i].data(), x.data(), w[i], biases[i], N);
        outs[i] = {got[i].data(), &w[i], biases[i]};
      }
      be->linear_forward_group(outs, 3, x.data(), N);
      for (size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(same_bits(got[i], want[i])) << be->describe() << " member " << i << " N=" << N;
    }
}

TEST(SimulatedDevice, ForwardEqualsTheCpuBackendOnEveryArchitectureFixture) {
  for (const char* f : {"llama_gqa", "llama_attn_bias", "llama_headdim", "llama_mha_odd", "llama_tied",
                        "llama3_rope", "mistral", "qwen2_bias"})
    expect_same_forward(kFixtures + f + "/base");
  // QLoRA's NF4 base, quantized at load: the NF4 blocks are what becomes resident.
  expect_same_forward(MEDTUNE_SOURCE_DIR "/tests/fixtures/nf4/tiny_llama/base", model::WeightQuant::kNf4);
  // The models are gone: so are their resident weights (only per-thread scratch may remain).
  EXPECT_EQ(device().resident_bytes(), 0);
}

// The server's ragged batches (forward_ragged): two sequences in two slots, one with an adapter,
// then a decode step of both: the slot and key-mask offsets and the adapter's resident copy.
TEST(SimulatedDevice, RaggedForwardEqualsTheCpuBackend) {
  model::LlamaModel cpu_model(io::open_checkpoint(kPeft + "/base"));
  model::LlamaModel dev_model(io::open_checkpoint(kPeft + "/base"), model::WeightQuant::kNone, device());
  auto lora = model::lora_from_peft(io::read_peft_adapter(kPeft + "/adapter"), cpu_model.config(), kPeft + "/adapter");
  model::KvCache cc = cpu_model.make_cache(3, 8), dc = dev_model.make_cache(3, 8);
  const model::RaggedBatch prompts{{5, 9, 14, 2, 7, 1, 3}, {2, 2, 2, 0, 0, 0, 0}, {0, 1, 2, 0, 1, 2, 3},
                                   {{3, 4, &lora}}, {2, 6, 4}};
  const model::RaggedBatch step{{8, 4}, {2, 0}, {3, 4}, {{1, 1, &lora}}, {0, 1}};
  for (const model::RaggedBatch* b : {&prompts, &step}) {
    std::vector<float> lc, ld;
    cpu_model.forward_ragged(*b, cc, lc);
    dev_model.forward_ragged(*b, dc, ld);
    EXPECT_TRUE(same_bits(ld, lc));
  }
  // forward_ragged made the adapter resident without set_lora: its copies go with it.
  for (const auto& layer : lora.layers)
    for (const auto& l : layer) {
      device().forget(l.A.data());
      device().forget(l.B.data());
    }
}

TEST(SimulatedDevice, AdapterIsReadFromItsResidentCopyAndRefreshedBySetLora) {
  model::LlamaModel cpu_model(io::open_checkpoint(kPeft + "/base"));
  model::LlamaModel dev_model(io::open_checkpoint(kPeft + "/base"), model::WeightQuant::kNone, device());
  auto lora = model::lora_from_peft(io::read_peft_adapter(kPeft + "/adapter"), cpu_model.config(), kPeft + "/adapter");
  const model::Batch batch{1, 6, {5, 9, 14, 2, 7, 1}, {}};
  cpu_model.set_lora(&lora);
  dev_model.set_lora(&lora);
  const auto base = model::LlamaModel(io::open_checkpoint(kPeft + "/base")).logits(batch);
  const auto want = cpu_model.logits(batch);
  ASSERT_FALSE(same_bits(want, base)) << "the adapter must change the logits for this test to mean anything";
  EXPECT_TRUE(same_bits(dev_model.logits(batch), want));

  // Changed on the host: the device keeps its copy until set_lora says so, as documented.
  for (auto& layer : lora.layers)
    for (auto& l : layer)
      for (float& b : l.B) b *= 2.0f;
  const auto want2 = cpu_model.logits(batch);
  dev_model.set_lora(&lora);
  EXPECT_TRUE(same_bits(dev_model.logits(batch), want2));
  dev_model.set_lora(nullptr);
  cpu_model.set_lora(nullptr);
}

TEST(SimulatedDevice, GreedyGenerationEqualsTheCpuBackend) {
  model::LlamaModel cpu_model(io::open_checkpoint(kFixtures + "llama_gqa/base"));
  model::LlamaModel dev_model(io::open_checkpoint(kFixtures + "llama_gqa/base"), model::WeightQuant::kNone, device());
  model::GenerateOptions opt;
  opt.max_new_tokens = 8;
  const std::vector<int32_t> prompt{3, 17, 5};
  EXPECT_EQ(model::generate(dev_model, prompt, opt), model::generate(cpu_model, prompt, opt));
}

// One training pass (forward, loss head, backward) on the device: the loss and every LoRA
// gradient equal the CPU backend's bit for bit, with and without gradient checkpointing, on a
// packed batch and on a GGUF-permuted model's q/k (redo_gguf_qk_permutation). The CPU reference
// runs in one pass over all rows (no row shards, no last-layer row restriction: policies of the
// CPU backend that change fp32 summation order, layer.h, row_shards.h).
// With passes > 1 the device runs the rows in that many passes (TrainOptions::device_passes)
// and the CPU in as many row shards, which sum the same per-row gradients in the same order.
void expect_same_training(const std::string& fixture, const model::TrainBatch& b, bool checkpointing,
                          double dropout = 0, int64_t passes = 1) {
  SCOPED_TRACE(fixture + (checkpointing ? " (checkpointing)" : "") +
               (dropout > 0 ? " (dropout)" : "") +
               (passes > 1 ? " (" + std::to_string(passes) + " passes)" : ""));
  model::LlamaModel cpu_model(io::open_checkpoint(fixture));
  model::LlamaModel dev_model(io::open_checkpoint(fixture), model::WeightQuant::kNone, device());
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o, model::Proj::gate,
                model::Proj::up, model::Proj::down};
  lc.dropout = dropout;
  model::LoraWeights lora = model::init_lora(cpu_model.config(), lc, 7);
  for (auto& layer : lora.layers)  // B = 0 at init would make dA zero: give it values
    for (auto& l : layer)
      for (size_t i = 0; i < l.B.size(); ++i) l.B[i] = 0.01f * static_cast<float>(static_cast<int>(i % 7) - 3);
  model::LoraWeights lora_dev = lora;
  model::TrainOptions opt;
  opt.loss_scale = 0.25;
  opt.gradient_checkpointing = checkpointing;
  opt.dropout_seed = dropout > 0 ? 99 : 0;
  opt.row_shards = passes;
  opt.device_passes = passes;
  opt.last_layer_rows_only = false;
  lora.zero_grad();
  lora_dev.zero_grad();
  const auto want = model::forward_backward(cpu_model, lora, b, opt);
  const auto got = model::forward_backward(dev_model, lora_dev, b, opt);
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  EXPECT_EQ(got.tokens, want.tokens);
  bool any_nonzero = false;
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (size_t p = 0; p < model::kNumProj; ++p) {
      EXPECT_TRUE(same_bits(lora_dev.layers[l][p].dA, lora.layers[l][p].dA)) << "layer " << l << " proj " << p;
      EXPECT_TRUE(same_bits(lora_dev.layers[l][p].dB, lora.layers[l][p].dB)) << "layer " << l << " proj " << p;
      for (float g : lora.layers[l][p].dA) any_nonzero |= g != 0.0f;
    }
  EXPECT_TRUE(any_nonzero);
  // And the loss alone (validation) through forward_loss.
  EXPECT_EQ(model::forward_loss(dev_model, b).loss_sum, model::forward_loss(cpu_model, b).loss_sum);
}

model::TrainBatch training_batch(bool packed) {
  model::TrainBatch b;
  b.B = 2;
  b.T = 6;
  b.ids = {3, 17, 5, 42, 9, 1, 30, 2, 8, 11, 4, 6};
  b.targets = {17, 5, 42, -100, 1, -100, -100, 8, 11, 4, 6, -100};
  if (packed) b.positions = {0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 0, 1};
  else b.mask = {1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1};
  return b;
}

TEST(SimulatedDevice, TrainingPassEqualsTheCpuBackend) {
  for (const bool checkpointing : {false, true}) {
    expect_same_training(kFixtures + "llama_gqa/base", training_batch(false), checkpointing);
    expect_same_training(kFixtures + "qwen2_bias/base", training_batch(true), checkpointing);
  }
}

TEST(SimulatedDevice, TrainingPassOnAGgufModelEqualsTheCpuBackend) {
  const char* path = std::getenv("MEDTUNE_SMOLLM2_GGUF");
  if (path == nullptr || !std::filesystem::exists(path))
    GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  expect_same_training(path, training_batch(false), false);
}

// LoRA dropout through the backend's op (Backend::lora_dropout): the device draws the CPU's masks,
// forward and backward (where the mask is drawn again), with and without checkpointing.
TEST(SimulatedDevice, TrainingPassWithLoraDropoutEqualsTheCpuBackend) {
  for (const bool checkpointing : {false, true})
    expect_same_training(kFixtures + "llama_gqa/base", training_batch(false), checkpointing, 0.1);
}

// A batch in passes of fewer rows (the memory plan's answer to max_device_memory): each pass's
// rows keep their dropout masks and targets, and the device's passes give the CPU row shards'
// loss and gradients bit for bit (the same per-row sums, added in the same order).
TEST(SimulatedDevice, TrainingInPassesEqualsTheCpuRowShards) {
  model::TrainBatch four = training_batch(false);
  model::TrainBatch second = training_batch(true);  // rows 3 and 4: its tokens, unpacked
  four.B = 4;
  four.ids.insert(four.ids.end(), second.ids.begin(), second.ids.end());
  four.targets.insert(four.targets.end(), second.targets.begin(), second.targets.end());
  four.mask.insert(four.mask.end(), 12, 1);
  for (const bool checkpointing : {false, true})
    for (const int64_t passes : {2, 3}) {
      expect_same_training(kFixtures + "llama_gqa/base", four, checkpointing, 0, passes);
      expect_same_training(kFixtures + "llama_gqa/base", four, checkpointing, 0.1, passes);
    }
}

}  // namespace
}  // namespace medtune
