// LlamaModel::forward_ragged: the server's batches of tokens from several sequences (llama.h).
#include <string>

#include "core/error.h"
#include "model/llama.h"
#include "model/rope.h"

namespace medtune::model {

namespace {

// The batch's runs of one slot each, checked against the cache (RaggedBatch's contract).
std::vector<SeqRun> runs_of(const RaggedBatch& b, const KvCache& cache) {
  const auto N = static_cast<int64_t>(b.ids.size());
  if (static_cast<int64_t>(b.slots.size()) != N || static_cast<int64_t>(b.positions.size()) != N)
    throw Internal("forward_ragged: ids, slots and positions differ in size");
  std::vector<SeqRun> runs;
  std::vector<uint8_t> seen(static_cast<size_t>(cache.B), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t slot = b.slots[static_cast<size_t>(n)], pos = b.positions[static_cast<size_t>(n)];
    if (slot < 0 || slot >= cache.B) throw Internal("forward_ragged: slot " + std::to_string(slot) + " out of range");
    if (pos < 0 || pos >= cache.Smax)
      throw Internal("forward_ragged: position " + std::to_string(pos) + " beyond the cache (" +
                     std::to_string(cache.Smax) + " positions per slot)");
    if (!runs.empty() && runs.back().slot == slot) {
      if (pos != runs.back().past + runs.back().T) throw Internal("forward_ragged: a slot's positions must be consecutive");
      ++runs.back().T;
      continue;
    }
    if (seen[static_cast<size_t>(slot)] != 0) throw Internal("forward_ragged: slot " + std::to_string(slot) + " in two runs");
    if (pos > cache.lengths[static_cast<size_t>(slot)])
      throw Internal("forward_ragged: slot " + std::to_string(slot) + " starts at " + std::to_string(pos) +
                     " past its filled length " + std::to_string(cache.lengths[static_cast<size_t>(slot)]));
    seen[static_cast<size_t>(slot)] = 1;
    runs.push_back({slot, n, 1, pos});
  }
  return runs;
}

}  // namespace

void LlamaModel::forward_ragged(const RaggedBatch& batch, KvCache& cache, std::vector<float>& logits) {
  const ModelConfig& c = config();
  const auto N = static_cast<int64_t>(batch.ids.size());
  const int64_t C = c.hidden_size, HD = c.head_dim, V = c.vocab_size;
  backend::Backend& be = *be_;
  if (&cache.backend() != &be) throw Internal("forward_ragged: the KV cache is on another backend than the model");
  const std::vector<SeqRun> runs = runs_of(batch, cache);
  for (const SeqRun& r : runs) check_sliding_window(c, r.past + r.T);
  for (const LoraSegment& s : batch.adapters)
    if (s.row0 < 0 || s.rows < 0 || s.row0 + s.rows > N) throw Internal("forward_ragged: adapter segment out of range");
  for (const int64_t r : batch.logit_rows)
    if (r < 0 || r >= N) throw Internal("forward_ragged: logit row out of range");
  for (const int32_t id : batch.ids)
    if (id < 0 || id >= V)
      throw BadInput("token id " + std::to_string(id) + " is outside the vocabulary (size " + std::to_string(V) + ")");
  const auto R = static_cast<int64_t>(batch.logit_rows.size());
  logits.resize(static_cast<size_t>(R * V));
  if (N == 0) return;

  backend::Array<float> x(be, static_cast<size_t>(N * C));  // residual stream (N, C)
  be.embedding(x.data(), w_.embed, batch.ids.data(), N);
  std::vector<float> cos(static_cast<size_t>(N * HD / 2)), sin(cos.size());  // (N, HD/2)
  rope_tables(inv_freq_, batch.positions.data(), N, cos.data(), sin.data());
  backend::Array<float> cos_d, sin_d;  // (N, HD/2) on be
  cos_d.upload(be, cos);
  sin_d.upload(be, sin);

  for (const SeqRun& r : runs) {
    for (int64_t t = 0; t < r.T; ++t) cache.valid[static_cast<size_t>(r.slot * cache.Smax + r.past + t)] = 1;
    cache.lengths[static_cast<size_t>(r.slot)] = r.past + r.T;
  }
  backend::Array<uint8_t> valid;  // (B, Smax) on be
  valid.upload(be, cache.valid);

  RaggedActs acts;  // reused by every layer
  acts.resize(be, c, N);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const RaggedLayerCall call{be, c, w_.layers[static_cast<size_t>(l)], l, w_.qk_rows_permuted, runs, batch.adapters,
                               cos_d.data(), sin_d.data(), cache.layer_k(l), cache.layer_v(l), valid.data(),
                               cache.Smax};
    layer_forward_ragged(call, x.data(), acts);
  }
  if (R == 0) return;

  // Final norm and lm_head on the rows asked for.
  backend::Array<float> h(be, static_cast<size_t>(R * C)), hn(be, h.size());  // (R, C) each
  be.gather_rows(h.data(), x.data(), batch.logit_rows.data(), R, C);
  be.rmsnorm_forward(hn.data(), nullptr, h.data(), w_.final_norm.data(), R, C, static_cast<float>(c.rms_norm_eps));
  backend::Array<float> out(be, static_cast<size_t>(R * V));  // (R, V)
  be.linear_forward(out.data(), hn.data(), w_.lm_head, nullptr, R);
  be.to_host(logits.data(), out.data(), out.bytes());
}

}  // namespace medtune::model
