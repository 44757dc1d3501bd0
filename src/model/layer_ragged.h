// One decoder layer over a ragged token batch: the server's continuous batching (serve/engine.h).
// N tokens of several sequences share every projection (one (N, C) product each), while each
// sequence attends to its own row ("slot") of the KV cache at its own positions, and each adapter
// segment adds its own LoRA side path. Inference only (no activations kept, no dropout); the same
// arithmetic as layer_forward (model/layer.h) with the row-local ops run on all N rows at once.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/array.h"
#include "backend/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/weights.h"

namespace medtune::model {

// Tokens [row0, row0 + T) of a batch: one sequence's next T tokens, at positions [past, past + T)
// of KV cache row `slot`.
struct SeqRun {
  int64_t slot = 0, row0 = 0, T = 0, past = 0;
};

// Rows [row0, row0 + rows) of a batch run with adapter `lora` (null: the base model).
struct LoraSegment {
  int64_t row0 = 0, rows = 0;
  LoraWeights* lora = nullptr;
};

// The layer's temporaries for N tokens, on one backend (contents unspecified between calls).
struct RaggedActs {
  using Buf = backend::Array<float>;
  Buf n1, n2;          // (N, C) the norms' outputs
  Buf q, att;          // (N, NH, HD)
  Buf k, v;            // (N, NKV, HD) before they go to the cache
  Buf proj;            // (N, C) o_proj's, then down_proj's output (x itself holds x_mid)
  Buf gate, up, h;     // (N, F)
  void resize(backend::Backend& be, const ModelConfig& c, int64_t N);
};

struct RaggedLayerCall {
  backend::Backend& be;
  const ModelConfig& config;
  const LayerWeights& w;
  int64_t layer;
  bool qk_rows_permuted;                  // GGUF llama/mistral: undo after projecting
  const std::vector<SeqRun>& runs;        // cover rows [0, N) in order, one slot each
  const std::vector<LoraSegment>& loras;  // disjoint row ranges; rows outside: no adapter
  const float* cos;                       // (N, HD/2) on be, at each token's position
  const float* sin;
  KvSlice k_cache;                        // (B, Smax, NKV, HD) this layer's cache, on be
  KvSlice v_cache;
  const uint8_t* key_valid;               // (B, Smax) on be
  int64_t Smax;
};

// x (N, C): in = the layer's input, out = its output. Writes each run's keys and values into its
// slot at positions [past, past + T).
void layer_forward_ragged(const RaggedLayerCall& call, float* x, RaggedActs& a);

}  // namespace medtune::model
