#include "model/inference_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "gpu/attention_plan.h"

namespace medtune::model {

namespace {

constexpr double kF = 4.0;                   // bytes per fp32
constexpr double kChunkFloats = 16777216.0;  // the GPU backend's dequantization chunk (2^24 floats)

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// The LoRA buffers of one layer's forward, in floats: lora_u (N x each rank) and the calling
// thread's group scratch (model/lora_linear.cpp): the stacked A of the largest group (q, k, v |
// o | gate, up | down) and its (N, sum r) product. The largest layer's.
double lora_floats(const LoraWeights& lora, const ModelConfig& c, double N) {
  const LoraScratchShape s = lora_scratch_shape(c, lora);
  return N * s.layer_r + s.group_a + N * s.group_r;
}

}  // namespace

InferencePlan plan_inference(const ModelConfig& c, double weight_bytes, const LoraWeights* lora,
                             const InferenceShape& s, backend::Precision precision) {
  InferencePlan p;
  const auto C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const auto NH = static_cast<double>(c.num_attention_heads), HD = static_cast<double>(c.head_dim);
  const auto QD = NH * HD, KVD = static_cast<double>(c.num_key_value_heads) * HD;
  const auto N = static_cast<double>(s.tokens), R = static_cast<double>(s.logit_rows);
  const double positions = static_cast<double>(s.cache_rows) * static_cast<double>(s.cache_len);
  p.weights = weight_bytes;
  p.adapter = lora != nullptr ? kF * static_cast<double>(lora->num_parameters()) : 0.0;
  p.kv = static_cast<double>(c.num_hidden_layers) * positions * 2 * KVD * kF;
  // Residual stream, RoPE tables; one layer's activations (LayerActs: x_in, n1, x_mid, n2; q,
  // att; gate, up; two rstd; the attention's logsumexp) and scratch (k, v, the o_proj/down
  // output, silu(gate) * up); the final norm's input and output rows.
  const double layer = 5 * C + 2 * QD + 2 * KVD + 3 * F + 2 + NH;
  p.acts = kF * (N * C + N * HD + N * layer + 2 * R * C) + positions /* key mask, bytes */;
  if (lora != nullptr) p.acts += kF * lora_floats(*lora, c, N);
  p.logits = kF * R * static_cast<double>(c.vocab_size);
  p.workspace = device_workspace_bytes(c, s.tokens, precision);
  // The last layer keeps its logit rows only: gathered in place through the backend's temporary
  // (R, max(C, NH HD)).
  p.workspace += kF * R * std::max(C, QD);
  // The attention's workspace (one buffer, grown to the largest call): the GEMM attention's
  // scores for the longest pass against the full cache (an upper bound: the pass's queries are at
  // most min(N, Smax), its keys at most Smax), or the split-key kernel's partials for a decode
  // step at the end of the cache, whichever is larger.
  const int64_t longest = std::min(s.tokens, s.cache_len);
  p.workspace += std::max(
      device_attention_workspace_bytes(c, s.cache_rows, longest, s.cache_len, /*backward=*/false),
      device_attention_workspace_bytes(c, s.cache_rows, 1, s.cache_len, /*backward=*/false));
  return p;
}

double device_attention_workspace_bytes(const ModelConfig& c, int64_t B, int64_t T, int64_t n,
                                        bool backward) {
  const auto gemm = gpu::plan_attention_gemm(B, T, n, c.num_attention_heads, c.num_key_value_heads,
                                             backward)
                        .workspace_bytes();
  // A pass of T <= 4 queries runs its forward through the split-key kernel (also in training).
  const int64_t split =
      gpu::split_attention_workspace_bytes(B, T, n, c.num_attention_heads, c.head_dim);
  return static_cast<double>(std::max(gemm, split));
}

double device_workspace_bytes(const ModelConfig& c, int64_t tokens, backend::Precision precision) {
  const auto C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const auto QD = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double largest = std::max(F * C, static_cast<double>(c.vocab_size) * C);
  const double chunk = std::min(largest, kChunkFloats);
  double bytes = kF * chunk;
  // Host index lists staged on the device (gpu_backend.cpp's ids, rows, targets: 4 + 8 + 8 bytes
  // a token) and the loss's per-row values (4), kept at their largest; and each working buffer
  // rounded up to the backend's 256 bytes: kLiveBuffers is twice the most seen live at once
  // (~60 in a Llama-2-7B training step under HIP-CPU, docs/gpu.md).
  constexpr double kLiveBuffers = 128, kGranule = 256;
  bytes += 24.0 * static_cast<double>(tokens) + kLiveBuffers * kGranule;
  // bf16 GEMMs: the chunk rounded to bf16, and the GEMM's activation input (or output gradient)
  // rounded to bf16, (N, its width) at most N x max(F, C, QD).
  if (precision == backend::Precision::kBf16)
    bytes += 2 * chunk + 2 * static_cast<double>(tokens) * std::max(F, std::max(C, QD));
  return bytes;
}

std::string format_inference_plan(const InferencePlan& p, const std::string& device,
                                  const InferenceShape& s) {
  std::ostringstream out;
  out << "device " << device << " memory plan (" << s.cache_rows << " x " << s.cache_len
      << " cached positions, passes of up to " << s.tokens << " tokens, " << s.logit_rows
      << " logit rows):\n"
      << "  base weights (resident, stored dtype) " << mib(p.weights) << "\n";
  if (p.adapter > 0) out << "  LoRA A, B                    " << mib(p.adapter) << "\n";
  out << "  keys/values                  " << mib(p.kv) << "\n"
      << "  activations (one layer)      " << mib(p.acts) << "\n"
      << "  logits                       " << mib(p.logits) << "\n"
      << "  workspace                    " << mib(p.workspace) << "\n"
      << "  device total                 " << mib(p.total()) << "\n";
  return out.str();
}

void refuse_if_inference_too_large(const InferencePlan& p, const std::string& what,
                                   const std::string& device, double free_bytes,
                                   double already_there, const std::string& to_lower) {
  if (free_bytes <= 0 || p.total() - already_there <= free_bytes) return;
  throw BadInput(what + " needs " + mib(p.total()) + " on device " + device + " (base weights " +
                 mib(p.weights) + (p.adapter > 0 ? ", LoRA " + mib(p.adapter) : std::string()) +
                 ", keys/values " + mib(p.kv) + ", activations " + mib(p.acts) + ", logits " +
                 mib(p.logits) + ", workspace " + mib(p.workspace) + ") and " + mib(free_bytes) +
                 " is free there" +
                 (already_there > 0 ? " besides the " + mib(already_there) + " loaded already"
                                    : std::string()) +
                 "; lower " + to_lower + ", or use a device with more memory");
}

}  // namespace medtune::model
