// LoRA adapters on the linear projections of a Llama-family model, as PEFT defines them:
//   y = W x + b + scaling * B (A dropout(x)),  A: (r, in), B: (out, r),
//   scaling = alpha / r, or alpha / sqrt(r) with rsLoRA.
// Parameters, gradients (and, in train/, AdamW moments) are fp32.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"

namespace medtune::model {

// The seven projections of a decoder layer, in PEFT's module names.
enum class Proj : int { q = 0, k, v, o, gate, up, down };
constexpr int kNumProj = 7;
const char* proj_name(Proj p);  // "q_proj", ..., "down_proj"
// "q_proj" or "q" -> Proj; throws BadInput naming the valid names otherwise.
Proj proj_from_name(const std::string& name);
// "model.layers.3.self_attn.q_proj" / "model.layers.3.mlp.up_proj"
std::string proj_module_path(int64_t layer, Proj p);
// (out, in) of a projection under config c.
std::pair<int64_t, int64_t> proj_shape(const ModelConfig& c, Proj p);

struct LoraConfig {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;
  std::vector<Proj> targets;
  double scaling() const;
};

struct LoraLinear {
  int64_t r = 0, in = 0, out = 0;
  std::vector<float> A;   // (r, in)
  std::vector<float> B;   // (out, r)
  std::vector<float> dA;  // (r, in)  gradients, accumulated by backward
  std::vector<float> dB;  // (out, r)
  // Set while a trainer keeps A and B on a device (train/train_state.h): that device's copies,
  // which its optimizer updates in place; the host A and B lag behind until the trainer copies
  // them back. Null: the model's backend reads its resident() copy of A and B (A and B
  // themselves on the CPU).
  const float* device_A = nullptr;  // (r, in)
  const float* device_B = nullptr;  // (out, r)
  bool enabled() const { return r > 0; }
};

struct LoraWeights {
  LoraConfig config;
  float scaling = 0;
  std::vector<std::array<LoraLinear, kNumProj>> layers;  // [L][proj]

  LoraLinear& at(int64_t layer, Proj p) { return layers[static_cast<size_t>(layer)][static_cast<size_t>(p)]; }
  const LoraLinear& at(int64_t layer, Proj p) const { return layers[static_cast<size_t>(layer)][static_cast<size_t>(p)]; }
  int64_t num_parameters() const;
  void zero_grad();
};

// The adapter's shapes (r, in, out of every adapted projection) without its arrays: what memory
// planning needs, before anything of that size is allocated.
LoraWeights lora_shapes(const ModelConfig& c, const LoraConfig& lc);

// What the LoRA path's scratch is sized by (model/lora_linear.cpp), over every layer: the
// largest rank (max_r), the most summed ranks of a layer (layer_r), and of a group of projections
// that read one input (q, k, v | o | gate, up | down) the largest summed rank (group_r) and
// stacked A (group_a, sum r x in floats). The memory plans' one reading of it.
struct LoraScratchShape {
  double max_r = 0, layer_r = 0, group_r = 0, group_a = 0;
};
LoraScratchShape lora_scratch_shape(const ModelConfig& c, const LoraWeights& lora);

// PEFT's default initialization: A ~ kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
// B = 0, so the adapted model starts exactly at the base model. Deterministic in `seed`.
LoraWeights init_lora(const ModelConfig& c, const LoraConfig& lc, uint64_t seed);

}  // namespace medtune::model
