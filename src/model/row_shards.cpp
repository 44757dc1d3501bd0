#include "model/row_shards.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "model/layer.h"

namespace medtune::model {

namespace {

// One layer's LayerActs for N tokens, in bytes, n2 counted or not.
double layer_activation_bytes(const ModelConfig& c, const LoraWeights& lora, int64_t N,
                              bool n2_kept) {
  const double f = 4.0, n = static_cast<double>(N);  // fp32
  const auto C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const auto qdim = static_cast<double>(c.num_attention_heads * c.head_dim);
  double lora_r_total = 0;  // sum of r over the adapted projections of a layer
  if (!lora.layers.empty())
    for (const auto& ll : lora.layers.front()) lora_r_total += static_cast<double>(ll.r);
  // layer.h LayerActs: x_in, n1, x_mid (C each), n2 (C, when kept), rstd1, rstd2 (1 each), q, att
  // (NH*HD each), gate, up (F each), lora_u (r per adapted projection).
  return n * f * ((n2_kept ? 4 : 3) * C + 2 + 2 * qdim + 2 * F + lora_r_total);
}

}  // namespace

double planned_activation_bytes(const ModelConfig& c, const LoraWeights& lora, int64_t N,
                                bool gradient_checkpointing) {
  // n2 is kept only where gate or up has an adapter (layer.h): counted when any layer's has.
  bool n2_kept = false;
  for (int64_t l = 0; l < static_cast<int64_t>(lora.layers.size()); ++l)
    n2_kept |= mlp_input_adapted(&lora, l);
  const double layer = layer_activation_bytes(c, lora, N, n2_kept);
  const auto L = static_cast<double>(c.num_hidden_layers);
  const double n = static_cast<double>(N), C = static_cast<double>(c.hidden_size);
  return gradient_checkpointing ? L * n * 4.0 * C + layer : L * layer;
}

PassScratch planned_pass_scratch(const ModelConfig& c, const LoraWeights& lora, int64_t N,
                                 bool dropout, bool qk_rows_permuted) {
  const double f = 4.0, n = static_cast<double>(N);  // fp32
  const auto C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const auto HD = static_cast<double>(c.head_dim);
  const auto QD = static_cast<double>(c.num_attention_heads) * HD;
  const auto KVD = static_cast<double>(c.num_key_value_heads) * HD;
  // The LoRA path's du (the largest rank) and group scratch: its (N, sum r) product and its
  // stacked A with the same size of dA (lora_linear.cpp).
  const LoraScratchShape ls = lora_scratch_shape(c, lora);
  const double rmax = std::max(1.0, ls.max_r);
  // train_step.cpp: x and dx (C each), cos and sin (HD / 2 each), the key mask (1 byte).
  const double stream = n * (2 * C + HD) * f + n;
  // layer.cpp's slots, the forward's k, v, o_proj/down output and down_proj input sharing the
  // backward's dv, dnorm_in, dn and dgate, the attention's datt, dq, dk the MLP's dh, dgate, dup:
  // du (max r); dh/datt, dgate/dq/h, dup/dk; dv/k; dn/proj; dnorm_in/v; dq, dk in a GGUF
  // checkpoint's row order; with dropout the dropped input and lora_backward's input gradient
  // through the mask (lora_linear.cpp, N x the projection's input).
  double slots = rmax + 2 * std::max(F, QD) + std::max(F, KVD) + KVD + C + std::max(C, KVD);
  if (qk_rows_permuted) slots += QD + KVD;
  if (dropout) slots += std::max(C, F) + std::max({C, F, QD});
  // With dropout every adapted projection goes alone (each its own mask): no group scratch.
  const double groups = dropout ? 0.0 : n * ls.group_r + 2 * ls.group_a;
  return {stream + f * groups, f * n * slots};
}

double shard_copy_bytes(const LoraWeights& lora) {
  return 2.0 * 4.0 * static_cast<double>(lora.num_parameters());  // A, B and dA, dB in fp32
}

int64_t row_shards_for(const ModelConfig& c, const LoraWeights& lora, int64_t B, int64_t T,
                       const TrainOptions& opt, int threads) {
  if (opt.row_shards > 0) return std::min(opt.row_shards, B);
  // One shard per thread, and only when every thread gets rows: with fewer rows than threads
  // (say 4 rows on 16 cores) single-threaded shards would leave cores idle, while one pass
  // splits every op over all of them.
  if (threads <= 1 || B < threads) return 1;
  const int64_t shards = threads;
  const double extra = static_cast<double>(shards - 1) * shard_copy_bytes(lora);
  // Measured against the activations without checkpointing whether it is on or not, so that
  // checkpointing never changes the shard count (and so the gradients' bits), and with n2 counted
  // in every layer, as the count was decided before n2 was left out where no adapter reads it
  // (the same counts, so the same bits).
  const double acts =
      static_cast<double>(c.num_hidden_layers) * layer_activation_bytes(c, lora, B * T, true);
  return extra <= 0.25 * acts ? shards : 1;
}

namespace {

// Rows [r0, r1) of a batch.
TrainBatch rows_of(const TrainBatch& b, int64_t r0, int64_t r1) {
  TrainBatch s;
  s.B = r1 - r0;
  s.T = b.T;
  const auto slice = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    return v.empty() ? V{} : V(v.begin() + r0 * b.T, v.begin() + r1 * b.T);
  };
  s.ids = slice(b.ids);
  s.mask = slice(b.mask);
  s.targets = slice(b.targets);
  s.positions = slice(b.positions);
  return s;
}

// The adapter copies of shards 1, 2, ..., kept from step to step (per calling thread), so that a
// run allocates them once.
std::vector<LoraWeights>& shard_adapters() {
  thread_local std::vector<LoraWeights> copies;
  return copies;
}

void add_gradients(LoraWeights& into, const LoraWeights& from) {
  for (size_t l = 0; l < into.layers.size(); ++l)
    for (size_t p = 0; p < into.layers[l].size(); ++p) {
      LoraLinear& dst = into.layers[l][p];
      const LoraLinear& src = from.layers[l][p];
      for (size_t i = 0; i < dst.dA.size(); ++i) dst.dA[i] += src.dA[i];
      for (size_t i = 0; i < dst.dB.size(); ++i) dst.dB[i] += src.dB[i];
    }
}

// On a device: rows [B s / P, B (s + 1) / P) in pass s, each adding into the same gradient
// accumulators (opt.device_grads, or each pass's own added into the host dA, dB), the row
// offsets keeping every token's dropout mask. Activations are the largest pass's, not the sum.
TrainStepResult device_passes(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                              const TrainOptions& opt) {
  const int64_t P = std::clamp<int64_t>(opt.device_passes, 1, std::max<int64_t>(1, batch.B));
  if (P == 1) return detail::forward_backward_one_pass(model, lora, batch, opt, 0);
  TrainStepResult total;
  for (int64_t s = 0; s < P; ++s) {
    const int64_t r0 = batch.B * s / P, r1 = batch.B * (s + 1) / P;
    const TrainStepResult r =
        detail::forward_backward_one_pass(model, lora, rows_of(batch, r0, r1), opt, r0 * batch.T);
    total.loss_sum += r.loss_sum;
    total.tokens += r.tokens;
    total.peak_activation_bytes = std::max(total.peak_activation_bytes, r.peak_activation_bytes);
  }
  return total;
}

}  // namespace

TrainStepResult forward_backward(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                                 const TrainOptions& opt) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Row shards are a CPU policy (threads); a device runs the batch in opt.device_passes passes
  // one after another (memory, not threads).
  if (!model.backend().device().is_cpu()) return device_passes(model, lora, batch, opt);
  const int64_t S = row_shards_for(model.config(), lora, batch.B, batch.T, opt, threads);
  if (S <= 1) return detail::forward_backward_one_pass(model, lora, batch, opt, 0);

  std::vector<LoraWeights>& copies = shard_adapters();
  copies.resize(static_cast<size_t>(S - 1));
  for (LoraWeights& copy : copies) {
    copy = lora;  // same A, B; reuses the copy's storage after the first step
    copy.zero_grad();
  }
  std::vector<TrainStepResult> results(static_cast<size_t>(S));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(S));
  // One shard per thread; inside, every op and BLAS call runs on its own thread (nested
  // parallelism is off), so the shards never wait for each other until the end.
#pragma omp parallel for num_threads(static_cast<int>(S)) schedule(static, 1)
  for (int64_t s = 0; s < S; ++s) {
    try {
      const int64_t r0 = batch.B * s / S, r1 = batch.B * (s + 1) / S;
      TrainOptions o = opt;
      if (s > 0) o.times = nullptr;  // phases timed on the calling thread's shard
      LoraWeights& target = s == 0 ? lora : copies[static_cast<size_t>(s - 1)];
      results[static_cast<size_t>(s)] =
          detail::forward_backward_one_pass(model, target, rows_of(batch, r0, r1), o, r0 * batch.T);
    } catch (...) {
      errors[static_cast<size_t>(s)] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  TrainStepResult total;
  for (size_t s = 0; s < results.size(); ++s) {  // shard order: deterministic sums
    if (s > 0) add_gradients(lora, copies[s - 1]);
    total.loss_sum += results[s].loss_sum;
    total.tokens += results[s].tokens;
    total.peak_activation_bytes += results[s].peak_activation_bytes;
  }
  return total;
}

}  // namespace medtune::model
