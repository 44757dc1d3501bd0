#include "model/llama.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "model/layer.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace medtune::model {

void check_sliding_window(const ModelConfig& c, int64_t length) {
  if (c.sliding_window > 0 && length > c.sliding_window)
    throw BadInput("sequence of " + std::to_string(length) + " tokens exceeds the model's sliding_window (" +
                   std::to_string(c.sliding_window) +
                   "); medtune attends causally to all positions, which equals sliding-window "
                   "attention only up to the window (docs/decisions/mistral-sliding-window.md)");
}

LlamaModel::LlamaModel(io::Checkpoint ckpt, WeightQuant quant) : ckpt_(std::move(ckpt)) {
  w_ = bind_weights(ckpt_, quant);
  inv_freq_ = rope_inv_freq(ckpt_.config);
}

std::vector<float> LlamaModel::logits(const Batch& batch) {
  KvCache cache(config(), batch.B, batch.T);
  std::vector<float> out;
  forward(batch, cache, out);
  return out;
}

void LlamaModel::forward(const Batch& batch, KvCache& cache, std::vector<float>& logits,
                         const std::vector<int64_t>& logit_rows) {
  const ModelConfig& c = config();
  const int64_t B = batch.B, T = batch.T, N = B * T, C = c.hidden_size, HD = c.head_dim;
  const int64_t V = c.vocab_size, past = cache.length;
  if (static_cast<int64_t>(batch.ids.size()) != N)
    throw Internal("forward: ids size " + std::to_string(batch.ids.size()) + " != B*T");
  if (cache.B != B || past + T > cache.Smax)
    throw Internal("forward: KV cache too small for this batch");
  check_sliding_window(c, past + T);

  std::vector<float> x(static_cast<size_t>(N * C));  // residual stream (N, C)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t id = batch.ids[static_cast<size_t>(n)];
    if (id < 0 || id >= V)
      throw BadInput("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                     std::to_string(V) + ")");
    dequantize_row(w_.embed.dtype, w_.embed.row(id), x.data() + n * C, C);
  }

  // Positions: token t of every row sits at past + t (transformers' default position_ids).
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[static_cast<size_t>(n)] = past + n % T;
  std::vector<float> cos(static_cast<size_t>(N * HD / 2)), sin(cos.size());  // (N, HD/2)
  rope_tables(inv_freq_, positions.data(), N, cos.data(), sin.data());

  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      cache.valid[static_cast<size_t>(b * cache.Smax + past + t)] =
          batch.mask.empty() ? 1 : batch.mask[static_cast<size_t>(b * T + t)];

  const ops::AttentionShape shape{B, T, past, cache.Smax, c.num_attention_heads,
                                  c.num_key_value_heads, HD};
  // Only the rows asked for leave the last layer: its o_proj and MLP run on those alone
  // (LayerCall::out_rows wants them ascending and distinct; keys and values still cover all rows).
  std::vector<int64_t> last_rows(logit_rows);
  std::sort(last_rows.begin(), last_rows.end());
  last_rows.erase(std::unique(last_rows.begin(), last_rows.end()), last_rows.end());
  if (!last_rows.empty() && (last_rows.front() < 0 || last_rows.back() >= N))
    throw Internal("forward: logit row out of range");
  if (static_cast<int64_t>(last_rows.size()) == N) last_rows.clear();  // every row: no gain
  LayerActs acts;  // reused by every layer: inference keeps nothing
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    acts.resize(c, N, lora_, l);
    LayerCall call{c, w_.layers[static_cast<size_t>(l)], l, w_.qk_rows_permuted, lora_, 0,
                   false, shape, cos.data(), sin.data(), cache.layer_k(l), cache.layer_v(l),
                   cache.valid.data()};
    if (l == c.num_hidden_layers - 1) call.out_rows = &last_rows;
    layer_forward(call, x.data(), acts);
  }
  cache.length = past + T;

  // Final norm and lm_head, only for the rows asked for.
  const int64_t R = logit_rows.empty() ? N : static_cast<int64_t>(logit_rows.size());
  std::vector<float> h(static_cast<size_t>(R * C));  // (R, C)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t src = logit_rows.empty() ? r : logit_rows[static_cast<size_t>(r)];
    if (src < 0 || src >= N) throw Internal("forward: logit row out of range");
    std::memcpy(h.data() + r * C, x.data() + src * C, static_cast<size_t>(C) * sizeof(float));
  }
  ops::rmsnorm_forward(h.data(), nullptr, h.data(), w_.final_norm.data(), R, C,
                       static_cast<float>(c.rms_norm_eps));
  logits.resize(static_cast<size_t>(R * V));
  ops::linear_forward(logits.data(), h.data(), w_.lm_head, nullptr, R);
}

}  // namespace medtune::model
