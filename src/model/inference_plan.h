// The device memory an inference command holds, planned from the model's shape before anything
// of that size is allocated: on a device, `eval` (the scorer), `generate` and `serve` refuse a
// plan beyond the device's free memory with its numbers before their first pass, instead of
// running out of memory in the middle (the last two also print it; docs/gpu.md). The training
// plan is train/memory_plan.h.
//
// The passes are LlamaModel::forward and forward_ragged: one layer's activations at a time
// (reused by every layer, so the peak is one layer's, not L layers'), keys and values of every
// layer in the KV cache, and the final norm and lm_head on the rows whose logits are asked for.
#pragma once

#include <cstdint>
#include <string>

#include "backend/device.h"
#include "model/config.h"
#include "model/lora.h"

namespace medtune::model {

// The largest pass a command makes and the cache it holds.
struct InferenceShape {
  int64_t cache_rows = 1;  // KvCache B: sequences held at once
  int64_t cache_len = 0;   // KvCache Smax: positions per sequence
  int64_t tokens = 0;      // N: tokens of the largest forward pass
  int64_t logit_rows = 0;  // R: rows of that pass whose logits come back
};

// Bytes.
struct InferencePlan {
  double weights = 0;  // the base weights, resident in their stored dtype
  double adapter = 0;  // LoRA A and B, resident in fp32
  double kv = 0;       // keys and values: L x B x Smax x 2 x NKV x HD fp32
  // One pass of N tokens: the residual stream (N, C), the RoPE tables (N, HD), the key mask
  // (B, Smax bytes), one layer's activations and scratch (N x (5C + 2 NH HD + 2 NKV HD + 3F + 2
  // + NH) fp32, plus N x (the layer's LoRA ranks) and the stacked A of a LoRA group), and the
  // final norm's rows (2 R C).
  double acts = 0;
  double logits = 0;  // (R, V) fp32
  // The GPU backend's own: one weight chunk dequantized to fp32 (at most 2^24 floats, 64 MiB);
  // with bf16 GEMMs also that chunk in bf16 and the largest GEMM input rounded to bf16 (N x F);
  // its staged index lists (24 bytes a token) and its rounding of each buffer to 256 bytes;
  // the attention's workspace (device_attention_workspace_bytes: the GEMM attention's scores, at
  // most 256 MiB, or a decode step's split-key partials).
  double workspace = 0;
  double total() const { return weights + adapter + kv + acts + logits + workspace; }
};

// The GPU backend's own workspace for passes of `tokens` rows (InferencePlan::workspace; training
// adds its loss-head chunk to it, train/memory_plan.h).
double device_workspace_bytes(const ModelConfig& c, int64_t tokens, backend::Precision precision);
// The GPU backend's attention workspace (gpu/attention_plan.h) for a pass of B rows of T queries
// against n keys (with its backward if `backward`): the GEMM attention's scores (T >= 16) or the
// split-key kernel's partials (T <= 4); 0 where only the tiled kernel runs (5 to 15 queries, or
// rows too long for the GEMM's bound).
double device_attention_workspace_bytes(const ModelConfig& c, int64_t B, int64_t T, int64_t n,
                                        bool backward);

// weight_bytes: the checkpoint's tensors as stored (planned_weight_bytes' sum); lora: null without
// an adapter (shapes are enough: lora_shapes).
InferencePlan plan_inference(const ModelConfig& c, double weight_bytes, const LoraWeights* lora,
                             const InferenceShape& s, backend::Precision precision);

// Several lines, each part in MiB, under a title naming the device and the command's shape.
std::string format_inference_plan(const InferencePlan& p, const std::string& device,
                                  const InferenceShape& s);

// Throws BadInput when the part of the plan not yet on the device (all but `already_there`
// bytes: the base weights, which LlamaModel uploads when it loads) is more than `free_bytes`
// (0: unknown, no check), naming the command (`what`, e.g. "evaluating"), the device, each part,
// what is free, and `to_lower` (the settings that shrink it, e.g. "--ctx-size").
void refuse_if_inference_too_large(const InferencePlan& p, const std::string& what,
                                   const std::string& device, double free_bytes,
                                   double already_there, const std::string& to_lower);

}  // namespace medtune::model
