// The memory a training run will need, planned from the model's shape and the config before
// anything of that size is allocated: printed by `train --dry-run`, and a plan that cannot fit is
// refused with its numbers instead of failing with std::bad_alloc or the OOM killer mid-run.
#pragma once

#include <cstdint>
#include <string>

#include "backend/device.h"
#include "model/config.h"
#include "model/lora.h"
#include "train/train_config.h"

namespace medtune::train {

// Bytes, fp32 throughout (CPU). mapped: the base model's file bytes; nf4: base linears quantized
// at load (QLoRA, model::planned_weight_bytes), owned in memory, whose originals are not resident.
// params: the LoRA parameters (gradients and AdamW's two moments are as large again each).
struct MemoryPlan {
  double mapped = 0, nf4 = 0, params = 0, acts = 0, acts_full = 0, acts_ckpt = 0, kv = 0,
         copies = 0;
  // bf16 copies of the frozen base linears (model::keep_bf16_copies: 2 bytes a weight), as
  // settle_bf16_copy decided them (0 from plan_memory).
  double bf16_copy = 0;
  int64_t shards = 1;
  int threads = 1;
  // What the run allocates itself (the mapped base is page cache the kernel can evict).
  double owned() const { return nf4 + 4 * params + acts + kv + copies + bf16_copy; }
  double total() const { return mapped + owned(); }

  // cfg.device other than cpu: what the device holds during a step. The base weights are resident
  // in their stored dtype (NF4 for QLoRA); beside them the training state (train/train_state.h:
  // the adapter's A and B, the step's gradients, AdamW's two moments) and one pass's gradient
  // accumulators when a step has several micro-batches (train/train_state.h: begin_pass): 4 or
  // 5 x params (each matrix padded to 256 bytes besides). The host keeps copies of
  // A, B, dA, dB and the moments for the sum over micro-batches and ranks and for checkpoints
  // (host_owned_with_device). device_acts: the activations kept, the pass's temporaries
  // (model/row_shards.h: PassScratch) with the larger of a layer's and the loss head's chunk
  // (256 x (V + 4C) fp32), and the attention's logsumexp. workspace: the GPU backend's own, one
  // dequantized weight chunk (fp32, at most 64 MiB), with bf16 GEMMs also their inputs rounded to
  // bf16 (model::device_workspace_bytes), and the attention's scores.
  bool on_device = false;
  // On a device, a micro-batch runs in device_passes passes of at most pass_rows rows
  // (plan_device_passes); every device part above is one pass's. 1 and micro_batch_size on
  // the CPU.
  int64_t device_passes = 1, pass_rows = 0;
  backend::Precision device_precision = backend::Precision::kFp32;
  double device_weights = 0, device_acts = 0, device_workspace = 0;
  double device_adapter_copies = 4;  // A and B, step gradients, m, v (and a pass's: 5)
  double device_adapter() const { return device_adapter_copies * params; }
  double device_total() const { return device_weights + device_adapter() + device_acts + kv + device_workspace; }
  double host_owned_with_device() const { return nf4 + 4 * params; }
};

// `lora` may hold shapes only (model::lora_shapes). qk_rows_permuted: the checkpoint's
// (io::Checkpoint; a GGUF file's q and k rows), whose backward holds two more temporaries.
MemoryPlan plan_memory(const TrainConfig& cfg, const ModelConfig& c, const model::LoraWeights& lora,
                       int64_t weight_bytes, int64_t nf4_bytes, bool qk_rows_permuted = false,
                       int64_t device_passes = 1);

// The most device memory a run may plan: max_device_memory when set, but never more than
// free_bytes, the device's free memory (0: unknown); 0 when neither is known.
double device_memory_limit(const TrainConfig& cfg, double free_bytes);

// plan_memory with the fewest device passes (1 up to micro_batch_size) whose device total is at
// most `limit` bytes (0: no limit, one pass): a micro-batch that does not fit at once runs in
// passes of fewer rows, which sum its gradients as gradient accumulation would (the same
// global batch and loss normalisation; the fp32 sums in another order). When even passes of one
// row do not fit, the plan of one-row passes (refuse_if_too_large_on_device then refuses it).
// On the CPU, plan_memory's.
MemoryPlan plan_device_passes(const TrainConfig& cfg, const ModelConfig& c,
                              const model::LoraWeights& lora, int64_t weight_bytes,
                              int64_t nf4_bytes, bool qk_rows_permuted, double limit);

// Whether the run keeps the base's bf16 copies (copy_bytes: 2 x model::bf16_copy_elements), into
// m.bf16_copy: only at precision bf16 on a CPU where oneDNN multiplies bf16 natively (the only
// kernel that reads them); then bf16_weight_copy true keeps them, false does not, and auto keeps
// them when the run with them plans at most half of `available` bytes (0: unknown, kept).
void settle_bf16_copy(const TrainConfig& cfg, MemoryPlan& m, double copy_bytes, double available);
std::string format_memory_plan(const TrainConfig& cfg, const MemoryPlan& m);

// Bytes of the files a checkpoint maps: a .gguf, or the .safetensors of a directory.
int64_t checkpoint_bytes(const std::string& path);

// MemAvailable from /proc/meminfo in bytes (0 when unknown).
double available_memory_bytes();

// Throws BadInput naming each part and the keys that shrink it when the memory the run allocates
// itself is more than `available` bytes (0: unknown, no check). With on_device, the host part only.
void refuse_if_too_large(const TrainConfig& cfg, const MemoryPlan& m, double available);
// The same for the device's part against device_memory_limit(cfg, free_bytes) (0: no check).
void refuse_if_too_large_on_device(const TrainConfig& cfg, const MemoryPlan& m, double free_bytes);

}  // namespace medtune::train
