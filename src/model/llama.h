// The Llama-family decoder (llama, mistral, qwen2), written out layer by layer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "model/kv_cache.h"
#include "model/layer_ragged.h"
#include "model/lora.h"
#include "model/weights.h"

namespace medtune::model {

// One forward call's input.
struct Batch {
  int64_t B = 1, T = 0;
  std::vector<int32_t> ids;    // (B, T)
  std::vector<uint8_t> mask;   // (B, T): 1 = token, 0 = padding; empty = all tokens
};

// One forward call of the server's continuous batching (like llama.cpp's llama_batch): N tokens,
// each with its own KV cache row (slot) and position. One slot's tokens are contiguous, in order,
// at consecutive positions starting at or below its filled length (cache.lengths[slot]; below it
// overwrites: a reused slot restarts at 0); a slot appears in one run per batch.
struct RaggedBatch {
  std::vector<int32_t> ids;            // (N)
  std::vector<int64_t> slots;          // (N) KV cache row of each token
  std::vector<int64_t> positions;      // (N)
  std::vector<LoraSegment> adapters;   // disjoint row ranges with their adapter; other rows: none
  std::vector<int64_t> logit_rows;     // (R) rows whose logits come back, in this order
};

// Refuses sequences longer than a sliding window (Mistral v0.1), which plain causal attention
// would compute differently from transformers.
void check_sliding_window(const ModelConfig& c, int64_t length);

class LlamaModel {
 public:
  // Takes ownership of the checkpoint (its mappings back the weights). quant: see bind_weights.
  // `be`: where forward() computes; a GPU backend receives every base weight here, in its stored
  // dtype (backend.h: resident), so that the first forward call uploads nothing large.
  explicit LlamaModel(io::Checkpoint ckpt, WeightQuant quant = WeightQuant::kNone,
                      backend::Backend& be = backend::cpu());
  ~LlamaModel();  // releases the backend's copies of the weights
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  backend::Backend& backend() const { return *be_; }
  // A cache for `batch` rows of up to `max_len` positions on this model's backend, of its
  // kv_type() (half on the CPU's int8 route), or of `type`.
  KvCache make_cache(int64_t batch, int64_t max_len) const {
    return make_cache(batch, max_len, be_->kv_type());
  }
  KvCache make_cache(int64_t batch, int64_t max_len, DType type) const {
    return KvCache(config(), batch, max_len, *be_, type);
  }

  const ModelConfig& config() const { return ckpt_.config; }
  const io::Checkpoint& checkpoint() const { return ckpt_; }
  const ModelWeights& weights() const { return w_; }
  // model::keep_bf16_copies on this model's weights (CPU backend only: a GPU backend holds its own
  // copies of the weights); returns the bytes allocated.
  int64_t keep_bf16_weight_copies();

  // Runs the batch at positions [cache.length, cache.length + T) of every row, appends its keys
  // and values to `cache` (which must be on this model's backend), and writes logits (host).
  //   logit_rows empty: logits (B, T, V) for every token;
  //   otherwise: logits (logit_rows.size(), V) for the listed flat token indices b*T + t.
  void forward(const Batch& batch, KvCache& cache, std::vector<float>& logits,
               const std::vector<int64_t>& logit_rows = {});

  // Runs a ragged batch (above): each token's key and value go to cache[slot][pos], each token
  // attends to its slot's positions [0, pos]; then cache.lengths[slot] = its last position + 1.
  // logits (R, V) for batch.logit_rows. set_lora's adapter is not used (batch.adapters is). On a
  // batch-invariant backend (backend::batch_invariant) a token's logits are bit for bit what they
  // are when its sequence runs alone with the same runs of tokens.
  void forward_ragged(const RaggedBatch& batch, KvCache& cache, std::vector<float>& logits);

  // Convenience: a fresh cache sized for `batch`, all logits (B, T, V).
  std::vector<float> logits(const Batch& batch);

  // A LoRA adapter applied by every forward call from now on (null: none). Not owned. A device
  // backend reads its own copy of the adapter's matrices, made at the first forward call: call
  // set_lora again after changing them (the CPU reads them in place).
  void set_lora(LoraWeights* lora);
  LoraWeights* lora() const { return lora_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  io::Checkpoint ckpt_;
  ModelWeights w_;
  std::vector<float> inv_freq_;  // (HD/2)
  LoraWeights* lora_ = nullptr;
  backend::Backend* be_;
  std::vector<const void*> resident_;       // host addresses of the weights resident on be_
  std::vector<const void*> lora_resident_;  // the adapter's A and B (copied at first use)
  void make_resident(const void* host, size_t bytes);
  void forget_lora();
};

}  // namespace medtune::model
