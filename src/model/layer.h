// One decoder layer, forward and backward, written out op by op.
//   x_mid = x_in + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))),  n1 = rmsnorm(x_in)
//   x_out = x_mid + down_proj(silu(gate_proj(n2)) * up_proj(n2)),                        n2 = rmsnorm(x_mid)
// The same code serves inference (activations overwritten layer after layer) and training
// (activations kept per layer for the backward pass, or recomputed from x_in). It runs on the
// call's backend (backend/backend.h): every activation below is that backend's memory. Forward and
// backward run on any backend (out_rows with a backward: the CPU backend only).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backend/array.h"
#include "backend/backend.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/lora_linear.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace medtune::model {

// Whether the layer's gate or up projection has an adapter (null lora: no), whose gradient reads
// the MLP's normed input: only then does a training pass keep LayerActs::n2.
bool mlp_input_adapted(const LoraWeights* lora, int64_t layer);

// Activations of one layer for N = B*T tokens (sizes set by resize()), on one backend.
struct LayerActs {
  using Buf = backend::Array<float>;
  Buf x_in;    // (N, C)   layer input (kept for backward / recompute)
  Buf n1;      // (N, C)   rmsnorm(x_in)
  Buf rstd1;   // (N)
  Buf q;       // (N, NH, HD) after rope
  Buf att;     // (N, NH, HD) attention output (o_proj input)
  Buf x_mid;   // (N, C)
  Buf n2;      // (N, C)   rmsnorm(x_mid); for backward only when gate or up has an adapter
               //          (its dA reads it), else empty and made in a temporary
  Buf rstd2;   // (N)
  Buf gate;    // (N, F)   gate_proj(n2), before silu
  Buf up;      // (N, F)
  // silu(gate) * up, down_proj's input, is not kept (N x F floats a layer): layer_forward makes
  // it in a temporary, layer_backward again where down_proj's adapter reads it (the same bits).
  std::array<Buf, kNumProj> lora_u;  // (N, r) each: A d(x), for LoRA grads
  Buf lse;     // (N, NH) attention logsumexp (device backends' backward; empty on the CPU)

  // Contents are unspecified after a resize (every buffer is written before it is read).
  // for_backward: a training pass's (layer_backward reads them); n2 then only as said above.
  void resize(backend::Backend& be, const ModelConfig& c, int64_t N, const LoraWeights* lora,
              int64_t layer, bool for_backward = false);
  int64_t bytes() const;
};

// What a layer needs besides its activations. Pointers to activations, tables and masks are
// memory of `be`; the weights and the adapter are host storage read through be.resident().
struct LayerCall {
  backend::Backend& be;
  const ModelConfig& config;
  const LayerWeights& w;
  int64_t layer;
  bool qk_rows_permuted;            // GGUF llama/mistral: undo after projecting
  LoraWeights* lora;                // null: no adapter
  uint64_t dropout_seed;            // per optimizer step (training); 0 with dropout off
  bool training;                    // LoRA dropout active
  const ops::AttentionShape& shape;
  const float* cos;                 // (N, HD/2) on be
  const float* sin;
  KvSlice k_cache;                  // (B, Smax, NKV, HD) this layer's cache, on be
  KvSlice v_cache;
  const uint8_t* key_valid;         // (B, Smax) on be
  const int64_t* seg_start = nullptr;  // (B, T) on be, packed rows: each token's example start; null = none
  // Training, last layer: the rows of x_out that are read afterwards (the loss head's target
  // positions), ascending flat indices into N; null or empty = all N rows. Everything after
  // attention (o_proj, residual, post-attention norm, MLP) is row-local, so with a list it runs
  // on these R rows only (the list is host memory): x_out's other rows are left unspecified (they
  // hold x_in), acts keeps
  // att, x_mid, n2, rstd2, gate, up, h and lora_u of o/gate/up/down in its first R rows, and
  // layer_backward takes dL/dx_out to be zero outside these rows (nothing read x_out there). With
  // layer_backward, the CPU backend only: another backend's attention backward reads all N rows
  // of the attention output, which the list compacts away.
  const std::vector<int64_t>* out_rows = nullptr;
  // false: the caller never reads dL/dx_in (layer 0: the embedding is frozen), so layer_backward
  // skips it (q/k/v input gradients, input norm backward); dx's contents are then unspecified.
  bool need_input_grad = true;
  // false: no backward reads this call's activations (inference, a no-grad forward), so
  // layer_forward keeps neither x_in nor x_mid: the residual stream is updated in x itself (three
  // copies of (N, C) a layer fewer; the sums are the same fp32 additions).
  bool keep_for_backward = true;
  // false: the caller reads only the activations, not x_out (gradient checkpointing's recomputed
  // forward, whose layer_backward follows at once): layer_forward stops once they are kept, after
  // down_proj's adapter input product, and skips down_proj's own product and the residual add
  // (a quarter of the layer's base products). x then holds neither x_in nor x_out.
  bool output_needed = true;
  // Flat index of row 0 within the whole batch when this is one shard of it (LoRA dropout masks).
  int64_t row0 = 0;
  // Where layer_backward accumulates the LoRA gradients: [layer][proj] buffers on `be`, or null
  // for the adapter's own dA, dB (host memory: the CPU backend only).
  const std::vector<std::array<LoraGrad, kNumProj>>* grads = nullptr;

  DropoutSite dropout(Proj p) const;
  // Rows after attention: R with out_rows, else N.
  int64_t rows_after_attention() const;
  bool restricted() const { return out_rows != nullptr && !out_rows->empty(); }
  const LoraLinear* lora_at(Proj p) const;
  LoraLinear* lora_at(Proj p);
  LoraGrad grad_at(Proj p) const;
};

// x (N, C): in = x_in, out = x_out (unspecified without output_needed). Fills acts (x_in and x_mid
// only with keep_for_backward) and appends k, v to the cache at positions [past, past + T).
void layer_forward(const LayerCall& call, float* x, LayerActs& acts);

// dx (N, C): in = dL/dx_out, out = dL/dx_in. LoRA gradients accumulate into call.grad_at().
// Training only: past == 0 and Smax == T.
void layer_backward(const LayerCall& call, float* dx, const LayerActs& acts);

// Frees the calling thread's layer_forward/layer_backward temporaries (on whichever backend), which
// they otherwise keep from one call to the next (training calls it after the backward, before the next loss head).
void release_backward_scratch();

}  // namespace medtune::model
