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

LlamaModel::LlamaModel(io::Checkpoint ckpt, WeightQuant quant, backend::Backend& be)
    : ckpt_(std::move(ckpt)), be_(&be) {
  w_ = bind_weights(ckpt_, quant);
  inv_freq_ = rope_inv_freq(ckpt_.config);
  if (be.device().is_cpu()) return;  // the CPU reads the mapping in place
  const auto matrix = [&](const ops::StoredMatrix& m) {
    make_resident(m.data, static_cast<size_t>(m.rows * m.row_bytes()));
  };
  const auto vec = [&](const std::vector<float>& v) {
    if (!v.empty()) make_resident(v.data(), v.size() * sizeof(float));
  };
  matrix(w_.embed);
  if (w_.lm_head.data != w_.embed.data) matrix(w_.lm_head);
  vec(w_.final_norm);
  for (const LayerWeights& l : w_.layers) {
    for (const ops::StoredMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) matrix(*m);
    for (const std::vector<float>* v : {&l.input_norm, &l.post_attn_norm, &l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias})
      vec(*v);
  }
}

int64_t LlamaModel::keep_bf16_weight_copies() {
  if (!be_->device().is_cpu()) throw Internal("keep_bf16_weight_copies: a CPU model's policy");
  return keep_bf16_copies(w_);
}

LlamaModel::~LlamaModel() {
  forget_lora();
  for (const void* p : resident_) be_->forget(p);
}

void LlamaModel::make_resident(const void* host, size_t bytes) {
  be_->resident(host, bytes);
  resident_.push_back(host);
}

void LlamaModel::forget_lora() {
  // Addresses recorded by set_lora: the adapter itself may already be gone (it is not owned).
  for (const void* p : lora_resident_) be_->forget(p);
  lora_resident_.clear();
}

void LlamaModel::set_lora(LoraWeights* lora) {
  forget_lora();  // the old adapter's device copies, and stale ones when `lora` is the same
  lora_ = lora;
  if (lora == nullptr || be_->device().is_cpu()) return;
  for (const auto& layer : lora->layers)
    for (const LoraLinear& l : layer)
      if (l.enabled()) {
        lora_resident_.push_back(l.A.data());
        lora_resident_.push_back(l.B.data());
      }
}

std::vector<float> LlamaModel::logits(const Batch& batch) {
  KvCache cache = make_cache(batch.B, batch.T);
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

  backend::Backend& be = *be_;
  if (&cache.backend() != &be) throw Internal("forward: the KV cache is on another backend than the model");
  for (int64_t n = 0; n < N; ++n) {
    const int32_t id = batch.ids[static_cast<size_t>(n)];
    if (id < 0 || id >= V)
      throw BadInput("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                     std::to_string(V) + ")");
  }
  backend::Array<float> x(be, static_cast<size_t>(N * C));  // residual stream (N, C)
  be.embedding(x.data(), w_.embed, batch.ids.data(), N);

  // Positions: token t of every row sits at past + t (transformers' default position_ids).
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[static_cast<size_t>(n)] = past + n % T;
  std::vector<float> cos(static_cast<size_t>(N * HD / 2)), sin(cos.size());  // (N, HD/2)
  rope_tables(inv_freq_, positions.data(), N, cos.data(), sin.data());
  backend::Array<float> cos_d, sin_d;  // (N, HD/2) on be
  cos_d.upload(be, cos);
  sin_d.upload(be, sin);

  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      cache.valid[static_cast<size_t>(b * cache.Smax + past + t)] =
          batch.mask.empty() ? 1 : batch.mask[static_cast<size_t>(b * T + t)];
  backend::Array<uint8_t> valid;  // (B, Smax) on be
  valid.upload(be, cache.valid);

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
    acts.resize(be, c, N, lora_, l);
    LayerCall call{be, c, w_.layers[static_cast<size_t>(l)], l, w_.qk_rows_permuted, lora_, 0,
                   false, shape, cos_d.data(), sin_d.data(), cache.layer_k(l), cache.layer_v(l),
                   valid.data()};
    if (l == c.num_hidden_layers - 1) call.out_rows = &last_rows;
    call.keep_for_backward = false;
    layer_forward(call, x.data(), acts);
  }
  cache.length = past + T;
  std::fill(cache.lengths.begin(), cache.lengths.end(), cache.length);

  // Final norm and lm_head, only for the rows asked for.
  const int64_t R = logit_rows.empty() ? N : static_cast<int64_t>(logit_rows.size());
  std::vector<int64_t> src(static_cast<size_t>(R));  // row of x feeding logits row r
  for (int64_t r = 0; r < R; ++r) {
    src[static_cast<size_t>(r)] = logit_rows.empty() ? r : logit_rows[static_cast<size_t>(r)];
    if (src[static_cast<size_t>(r)] < 0 || src[static_cast<size_t>(r)] >= N)
      throw Internal("forward: logit row out of range");
  }
  backend::Array<float> h(be, static_cast<size_t>(R * C)), hn(be, h.size());  // (R, C) each
  be.gather_rows(h.data(), x.data(), src.data(), R, C);
  be.rmsnorm_forward(hn.data(), nullptr, h.data(), w_.final_norm.data(), R, C,
                     static_cast<float>(c.rms_norm_eps));
  backend::Array<float> out(be, static_cast<size_t>(R * V));  // (R, V)
  be.linear_forward(out.data(), hn.data(), w_.lm_head, nullptr, R);
  logits.resize(static_cast<size_t>(R * V));
  be.to_host(logits.data(), out.data(), out.bytes());
}

}  // namespace medtune::model
