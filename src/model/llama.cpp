#include "model/llama.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace medtune::model {

LlamaModel::LlamaModel(io::Checkpoint ckpt) : ckpt_(std::move(ckpt)) {
  w_ = bind_weights(ckpt_);
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
  const int64_t B = batch.B, T = batch.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const int64_t V = c.vocab_size, past = cache.length;
  if (static_cast<int64_t>(batch.ids.size()) != N)
    throw Internal("forward: ids size " + std::to_string(batch.ids.size()) + " != B*T");
  if (cache.B != B || past + T > cache.Smax)
    throw Internal("forward: KV cache too small for this batch");

  // Activations of one layer at a time, (N, width) each.
  std::vector<float> x(static_cast<size_t>(N * C));         // residual stream (N, C)
  std::vector<float> xn(x.size());                          // normed input (N, C)
  std::vector<float> q(static_cast<size_t>(N * NH * HD));   // (N, NH, HD)
  std::vector<float> k(static_cast<size_t>(N * NKV * HD));  // (N, NKV, HD)
  std::vector<float> v(k.size());                           // (N, NKV, HD)
  std::vector<float> att(q.size());                         // (N, NH, HD)
  std::vector<float> proj(x.size());                        // (N, C)
  std::vector<float> gate(static_cast<size_t>(N * F));      // (N, F)
  std::vector<float> up(gate.size());                       // (N, F)
  std::vector<float> cos(static_cast<size_t>(N * HD / 2)), sin(cos.size());  // (N, HD/2)

  // Token embeddings: dequantize the rows of the ids.
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
  rope_tables(inv_freq_, positions.data(), N, cos.data(), sin.data());

  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      cache.valid[static_cast<size_t>(b * cache.Smax + past + t)] =
          batch.mask.empty() ? 1 : batch.mask[static_cast<size_t>(b * T + t)];

  const ops::AttentionShape shape{B, T, past, cache.Smax, NH, NKV, HD};
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    // --- attention block: x += o_proj(attention(rope(q), rope(k), v)) on rmsnorm(x)
    ops::rmsnorm_forward(xn.data(), nullptr, x.data(), lw.input_norm.data(), N, C, eps);
    ops::linear_forward(q.data(), xn.data(), lw.q, lw.q_bias.empty() ? nullptr : lw.q_bias.data(), N);
    ops::linear_forward(k.data(), xn.data(), lw.k, lw.k_bias.empty() ? nullptr : lw.k_bias.data(), N);
    ops::linear_forward(v.data(), xn.data(), lw.v, lw.v_bias.empty() ? nullptr : lw.v_bias.data(), N);
    if (w_.qk_rows_permuted) {
      undo_gguf_qk_permutation(q.data(), N, NH, HD);
      undo_gguf_qk_permutation(k.data(), N, NKV, HD);
    }
    ops::rope_forward(q.data(), cos.data(), sin.data(), N, NH, HD);
    ops::rope_forward(k.data(), cos.data(), sin.data(), N, NKV, HD);
    // Append this layer's keys and values to the cache: (B, T, NKV, HD) -> (B, Smax, NKV, HD).
    float* kc = cache.layer_k(l);
    float* vc = cache.layer_v(l);
    const int64_t row = NKV * HD;
    for (int64_t b = 0; b < B; ++b) {
      const size_t bytes = static_cast<size_t>(T * row) * sizeof(float);
      std::memcpy(kc + (b * cache.Smax + past) * row, k.data() + b * T * row, bytes);
      std::memcpy(vc + (b * cache.Smax + past) * row, v.data() + b * T * row, bytes);
    }
    ops::attention_forward(att.data(), q.data(), kc, vc, cache.valid.data(), shape);
    ops::linear_forward(proj.data(), att.data(), lw.o, lw.o_bias.empty() ? nullptr : lw.o_bias.data(), N);
    ops::add_inplace(x.data(), proj.data(), N * C);

    // --- MLP block: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
    ops::rmsnorm_forward(xn.data(), nullptr, x.data(), lw.post_attn_norm.data(), N, C, eps);
    ops::linear_forward(gate.data(), xn.data(), lw.gate, nullptr, N);
    ops::linear_forward(up.data(), xn.data(), lw.up, nullptr, N);
    ops::swiglu_forward(gate.data(), gate.data(), up.data(), N * F);
    ops::linear_forward(proj.data(), gate.data(), lw.down, nullptr, N);
    ops::add_inplace(x.data(), proj.data(), N * C);
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
  ops::rmsnorm_forward(h.data(), nullptr, h.data(), w_.final_norm.data(), R, C, eps);
  logits.resize(static_cast<size_t>(R * V));
  ops::linear_forward(logits.data(), h.data(), w_.lm_head, nullptr, R);
}

}  // namespace medtune::model
