#include "model/lora.h"

#include <algorithm>

#include <cmath>

#include "core/error.h"

namespace medtune::model {

namespace {
constexpr const char* kNames[kNumProj] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                          "gate_proj", "up_proj", "down_proj"};
}

const char* proj_name(Proj p) { return kNames[static_cast<int>(p)]; }

Proj proj_from_name(const std::string& name) {
  for (int i = 0; i < kNumProj; ++i) {
    const std::string full = kNames[i];
    if (name == full || name + "_proj" == full) return static_cast<Proj>(i);
  }
  throw BadInput("unknown LoRA target module '" + name +
                 "' (valid: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj)");
}

std::string proj_module_path(int64_t layer, Proj p) {
  const bool attn = p == Proj::q || p == Proj::k || p == Proj::v || p == Proj::o;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + proj_name(p);
}

std::pair<int64_t, int64_t> proj_shape(const ModelConfig& c, Proj p) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * c.head_dim, KVD = c.num_key_value_heads * c.head_dim;
  switch (p) {
    case Proj::q: return {QD, C};
    case Proj::k: return {KVD, C};
    case Proj::v: return {KVD, C};
    case Proj::o: return {C, QD};
    case Proj::gate: return {F, C};
    case Proj::up: return {F, C};
    case Proj::down: return {C, F};
  }
  return {0, 0};
}

double LoraConfig::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

int64_t LoraWeights::num_parameters() const {
  int64_t n = 0;
  for (const auto& layer : layers)
    for (const auto& l : layer) n += l.r * (l.in + l.out);  // A (r, in) + B (out, r), allocated or not
  return n;
}

void LoraWeights::zero_grad() {
  for (auto& layer : layers)
    for (auto& l : layer) {
      std::fill(l.dA.begin(), l.dA.end(), 0.0f);
      std::fill(l.dB.begin(), l.dB.end(), 0.0f);
    }
}

LoraScratchShape lora_scratch_shape(const ModelConfig& c, const LoraWeights& lora) {
  const auto C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const auto QD = static_cast<double>(c.num_attention_heads * c.head_dim);
  LoraScratchShape s;
  for (const auto& layer : lora.layers) {
    const auto r = [&](Proj p) { return static_cast<double>(layer[static_cast<size_t>(p)].r); };
    const double qkv = r(Proj::q) + r(Proj::k) + r(Proj::v), gu = r(Proj::gate) + r(Proj::up);
    s.max_r = std::max({s.max_r, r(Proj::q), r(Proj::k), r(Proj::v), r(Proj::o), r(Proj::gate),
                        r(Proj::up), r(Proj::down)});
    s.layer_r = std::max(s.layer_r, qkv + r(Proj::o) + gu + r(Proj::down));
    s.group_r = std::max({s.group_r, qkv, r(Proj::o), gu, r(Proj::down)});
    s.group_a = std::max({s.group_a, qkv * C, r(Proj::o) * QD, gu * C, r(Proj::down) * F});
  }
  return s;
}

LoraWeights lora_shapes(const ModelConfig& c, const LoraConfig& lc) {
  if (lc.r <= 0) throw BadInput("lora_r must be positive, got " + std::to_string(lc.r));
  if (lc.targets.empty()) throw BadInput("lora_target_modules is empty");
  LoraWeights w;
  w.config = lc;
  w.scaling = static_cast<float>(lc.scaling());
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (Proj p : lc.targets) {
      auto [out, in] = proj_shape(c, p);
      LoraLinear& ll = w.at(l, p);
      ll.r = lc.r;
      ll.in = in;
      ll.out = out;
    }
  return w;
}

LoraWeights init_lora(const ModelConfig& c, const LoraConfig& lc, uint64_t seed) {
  LoraWeights w = lora_shapes(c, lc);
  std::mt19937_64 rng(seed);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (Proj p : lc.targets) {
      LoraLinear& ll = w.at(l, p);
      // kaiming_uniform_(a=sqrt(5)): gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),
      // bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
      const float bound = 1.0f / std::sqrt(static_cast<float>(ll.in));
      std::uniform_real_distribution<float> u(-bound, bound);
      ll.A.resize(static_cast<size_t>(ll.r * ll.in));
      for (float& a : ll.A) a = u(rng);
      ll.B.assign(static_cast<size_t>(ll.out * ll.r), 0.0f);
      ll.dA.assign(ll.A.size(), 0.0f);
      ll.dB.assign(ll.B.size(), 0.0f);
    }
  return w;
}

}  // namespace medtune::model
