#include "model/train_step.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "model/layer.h"
#include "model/rope.h"
#include "model/row_shards.h"
#include "ops/backward.h"
#include "ops/ops.h"

namespace medtune::model {

namespace {

// Target rows' logits are computed this many at a time, so (rows, V) logits never exist for
// the whole batch: 256 x 49152 x 4 B = 48 MiB for SmolLM2.
constexpr int64_t kLossChunk = 256;

struct Prepared {
  int64_t N = 0;
  std::vector<float> x;         // (N, C) embeddings
  std::vector<float> cos, sin;  // (N, HD/2)
  std::vector<uint8_t> valid;   // (B, T)
  std::vector<int64_t> rows;    // flat indices of positions with a target
  std::vector<int64_t> seg_start;  // (B, T) packed rows: t - positions[t]; empty = not packed

  const int64_t* segments() const { return seg_start.empty() ? nullptr : seg_start.data(); }
};

// Positions of a packed batch: each row starts an example at 0 and every token starts one (0) or
// continues the previous one (+1). Returns seg_start (B, T).
std::vector<int64_t> segment_starts(const TrainBatch& b) {
  std::vector<int64_t> seg(b.positions.size());
  for (int64_t r = 0; r < b.B; ++r)
    for (int64_t t = 0; t < b.T; ++t) {
      const auto n = static_cast<size_t>(r * b.T + t);
      const int64_t pos = b.positions[n];
      if (pos != 0 && (t == 0 || pos != b.positions[n - 1] + 1))
        throw Internal("train batch: positions[" + std::to_string(r) + ", " + std::to_string(t) + "] = " +
                       std::to_string(pos) + " neither starts an example (0) nor continues one");
      seg[n] = t - pos;
    }
  return seg;
}

Prepared prepare(const LlamaModel& model, const TrainBatch& b) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  Prepared p;
  p.N = b.B * b.T;
  if (static_cast<int64_t>(b.ids.size()) != p.N || static_cast<int64_t>(b.targets.size()) != p.N ||
      (!b.mask.empty() && static_cast<int64_t>(b.mask.size()) != p.N) ||
      (!b.positions.empty() && static_cast<int64_t>(b.positions.size()) != p.N))
    throw Internal("train batch: ids/targets/mask/positions sizes disagree with B*T");
  const int64_t C = c.hidden_size, V = c.vocab_size;
  // Attention spans one example: a packed row may be longer than the window, its examples not.
  const int64_t span = b.positions.empty() ? b.T : *std::max_element(b.positions.begin(), b.positions.end()) + 1;
  check_sliding_window(c, span);
  p.x.resize(static_cast<size_t>(p.N * C));
  for (int64_t n = 0; n < p.N; ++n) {
    const int32_t id = b.ids[static_cast<size_t>(n)];
    if (id < 0 || id >= V) throw BadInput("token id " + std::to_string(id) + " is outside the vocabulary");
    dequantize_row(w.embed.dtype, w.embed.row(id), p.x.data() + n * C, C);
    const int64_t t = b.targets[static_cast<size_t>(n)];
    if (t >= V) throw BadInput("target id " + std::to_string(t) + " is outside the vocabulary");
    if (t >= 0) p.rows.push_back(n);
  }
  std::vector<int64_t> positions = b.positions;
  if (positions.empty()) {
    positions.resize(static_cast<size_t>(p.N));
    for (int64_t n = 0; n < p.N; ++n) positions[static_cast<size_t>(n)] = n % b.T;
  } else {
    p.seg_start = segment_starts(b);
  }
  p.cos.resize(static_cast<size_t>(p.N * c.head_dim / 2));
  p.sin.resize(p.cos.size());
  rope_tables(model.inv_freq(), positions.data(), p.N, p.cos.data(), p.sin.data());
  p.valid = b.mask.empty() ? std::vector<uint8_t>(static_cast<size_t>(p.N), 1) : b.mask;
  return p;
}

// Final norm + lm_head + cross-entropy over the target rows, chunked. With dx non-null also
// the backward: dx (N, C) receives dL/dx_final (zero on rows without a target).
double loss_head(const LlamaModel& model, const float* x, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& targets, double scale, float* dx) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  double loss = 0;
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> xin, h, rstd, logits, dh, dxin;
  std::vector<int64_t> tgt;
  for (int64_t r0 = 0; r0 < R; r0 += kLossChunk) {
    const int64_t n = std::min(kLossChunk, R - r0);
    xin.resize(static_cast<size_t>(n * C));   // (n, C)
    h.resize(xin.size());                     // (n, C)
    rstd.resize(static_cast<size_t>(n));
    logits.resize(static_cast<size_t>(n * V));  // (n, V)
    tgt.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = rows[static_cast<size_t>(r0 + i)];
      std::memcpy(xin.data() + i * C, x + row * C, static_cast<size_t>(C) * sizeof(float));
      tgt[static_cast<size_t>(i)] = targets[static_cast<size_t>(row)];
    }
    ops::rmsnorm_forward(h.data(), rstd.data(), xin.data(), w.final_norm.data(), n, C, eps);
    ops::linear_forward(logits.data(), h.data(), w.lm_head, nullptr, n);
    if (dx == nullptr) {
      loss += ops::cross_entropy_sum(logits.data(), tgt.data(), n, V).sum;
      continue;
    }
    // Loss and gradient in one pass over the logits (the gradient overwrites them).
    loss += ops::cross_entropy_loss_backward(logits.data(), logits.data(), tgt.data(), n, V,
                                             static_cast<float>(scale)).sum;
    dh.resize(h.size());
    ops::linear_backward_input(dh.data(), logits.data(), w.lm_head, n);
    dxin.resize(h.size());
    ops::rmsnorm_backward(dxin.data(), nullptr, dh.data(), xin.data(), w.final_norm.data(), rstd.data(), n, C);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = rows[static_cast<size_t>(r0 + i)];
      std::memcpy(dx + row * C, dxin.data() + i * C, static_cast<size_t>(C) * sizeof(float));
    }
  }
  return loss;
}

// Times a sequence of phases: each lap() returns the wall and process CPU seconds since the
// previous one.
class PhaseClock {
 public:
  PhaseClock() : wall_(std::chrono::steady_clock::now()), cpu_(std::clock()) {}
  PhaseTime lap() {
    const auto wall = std::chrono::steady_clock::now();
    const std::clock_t cpu = std::clock();
    const PhaseTime t{std::chrono::duration<double>(wall - wall_).count(),
                      static_cast<double>(cpu - cpu_) / CLOCKS_PER_SEC};
    wall_ = wall;
    cpu_ = cpu;
    return t;
  }

 private:
  std::chrono::steady_clock::time_point wall_;
  std::clock_t cpu_;
};

void add(PhaseTime& sum, const PhaseTime& t) {
  sum.wall += t.wall;
  sum.cpu += t.cpu;
}

// What forward_backward allocates at the size of the batch, kept from one call to the next (one
// set per calling thread): every layer's activations (~1 GiB for SmolLM2 at 4 x 256 tokens) and
// the keys/values. Allocating them afresh made every step zero-fill and page-fault ~1 GiB in
// the calling thread alone (~7% of a step on one core, more of the wall on two). The memory is
// the step's peak either way; it stays held between steps, as a training run needs it again.
struct StepArena {
  std::vector<LayerActs> saved;
  KvCache cache;
};

StepArena& step_arena() {
  thread_local StepArena arena;
  return arena;
}

// The arena's cache for this batch: reused when the shape matches. The training forward
// overwrites positions [0, T) of every row of every layer before anything reads them.
KvCache& training_cache(const ModelConfig& c, int64_t B, int64_t T) {
  KvCache& cache = step_arena().cache;
  if (cache.L != c.num_hidden_layers || cache.B != B || cache.Smax != T ||
      cache.NKV != c.num_key_value_heads || cache.HD != c.head_dim)
    cache = KvCache(c, B, T);
  return cache;
}

int64_t acts_bytes(const LayerActs& a) { return a.bytes(); }

// The training path runs the layers on the CPU backend so far (layer.h: the backward is CPU only);
// its host vectors (embeddings, rope tables, masks) are that backend's memory.
backend::Backend& training_backend(const LlamaModel& model) {
  if (!model.backend().device().is_cpu())
    throw BadInput("training and loss evaluation on device " + model.backend().device().str() +
                   " are not implemented yet: use --device cpu (docs/gpu.md)");
  return backend::cpu();
}

}  // namespace

namespace detail {
TrainStepResult forward_backward_one_pass(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                                          const TrainOptions& opt, int64_t row0) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  backend::Backend& be = training_backend(model);
  const int64_t L = c.num_hidden_layers, C = c.hidden_size;
  PhaseClock clock;
  StepTimes times;
  Prepared p = prepare(model, batch);
  KvCache& cache = training_cache(c, batch.B, batch.T);  // keys/values of every layer: attention backward reads them
  std::copy(p.valid.begin(), p.valid.end(), cache.valid.begin());
  const ops::AttentionShape shape{batch.B, batch.T, 0, batch.T, c.num_attention_heads,
                                  c.num_key_value_heads, c.head_dim};
  // The loss head reads the last layer's output only at the target rows, so that layer's
  // row-local part (o_proj, MLP) runs on those rows alone (layer.h: LayerCall::out_rows); no gain
  // when every row has a target.
  const int64_t R = static_cast<int64_t>(p.rows.size());
  const bool rows_only = opt.last_layer_rows_only && R > 0 && R < p.N;
  auto call_for = [&](int64_t l) {
    LayerCall call{be, c, w.layers[static_cast<size_t>(l)], l, w.qk_rows_permuted, &lora,
                   opt.dropout_seed, true, shape, p.cos.data(), p.sin.data(), cache.layer_k(l),
                   cache.layer_v(l), cache.valid.data(), p.segments()};
    if (rows_only && l == L - 1) call.out_rows = &p.rows;
    call.need_input_grad = l > 0;  // the embedding is frozen: nothing reads layer 0's dL/dx_in
    call.row0 = row0;
    return call;
  };

  // Forward, keeping every layer's activations, or only its input with checkpointing.
  std::vector<LayerActs>& saved = step_arena().saved;
  saved.resize(static_cast<size_t>(opt.gradient_checkpointing ? 1 : L));
  std::vector<std::vector<float>> inputs(static_cast<size_t>(opt.gradient_checkpointing ? L : 0));
  int64_t act_bytes = 0;
  for (int64_t l = 0; l < L; ++l) {
    LayerActs& a = saved[static_cast<size_t>(opt.gradient_checkpointing ? 0 : l)];
    a.resize(be, c, p.N, &lora, l);
    if (opt.gradient_checkpointing) inputs[static_cast<size_t>(l)] = p.x;
    layer_forward(call_for(l), p.x.data(), a);
    act_bytes += opt.gradient_checkpointing ? static_cast<int64_t>(p.x.size()) * 4 : acts_bytes(a);
  }

  // p.x = the last layer's output, at the target rows only when rows_only (the loss head reads
  // nothing else). The layers' temporaries are not held through the loss head's peak.
  release_backward_scratch();
  times.forward = clock.lap();
  TrainStepResult result;
  result.tokens = static_cast<int64_t>(p.rows.size());
  std::vector<float> dx(static_cast<size_t>(p.N * C), 0.0f);  // (N, C) dL/dx
  result.loss_sum = loss_head(model, p.x.data(), p.rows, batch.targets, opt.loss_scale, dx.data());
  times.loss_head = clock.lap();

  for (int64_t l = L - 1; l >= 0; --l) {
    LayerActs& a = saved[static_cast<size_t>(opt.gradient_checkpointing ? 0 : l)];
    if (opt.gradient_checkpointing) {  // recompute this layer's activations from its input
      std::vector<float> x = inputs[static_cast<size_t>(l)];
      layer_forward(call_for(l), x.data(), a);
    }
    layer_backward(call_for(l), dx.data(), a);
  }
  // Allocated once for the 30 layers above; not held until the next step's loss head.
  release_backward_scratch();
  times.backward = clock.lap();
  if (opt.times != nullptr) {
    add(opt.times->forward, times.forward);
    add(opt.times->loss_head, times.loss_head);
    add(opt.times->backward, times.backward);
  }
  result.peak_activation_bytes = act_bytes + (opt.gradient_checkpointing ? acts_bytes(saved[0]) : 0) +
                                 cache.bytes();
  return result;
}
}  // namespace detail

namespace {
// Forward through every layer without gradients: p.x becomes the last layer's output (N, C).
void forward_layers(LlamaModel& model, Prepared& p, const TrainBatch& batch) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  backend::Backend& be = training_backend(model);
  KvCache cache(c, batch.B, batch.T, be);
  std::copy(p.valid.begin(), p.valid.end(), cache.valid.begin());
  const ops::AttentionShape shape{batch.B, batch.T, 0, batch.T, c.num_attention_heads,
                                  c.num_key_value_heads, c.head_dim};
  LayerActs a;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    a.resize(be, c, p.N, model.lora(), l);
    const LayerCall call{be, c, w.layers[static_cast<size_t>(l)], l, w.qk_rows_permuted, model.lora(),
                         0, false, shape, p.cos.data(), p.sin.data(), cache.layer_k(l),
                         cache.layer_v(l), cache.valid.data(), p.segments()};
    layer_forward(call, p.x.data(), a);
  }
}
}  // namespace

TrainStepResult forward_loss(LlamaModel& model, const TrainBatch& batch) {
  Prepared p = prepare(model, batch);
  forward_layers(model, p, batch);
  TrainStepResult r;
  r.tokens = static_cast<int64_t>(p.rows.size());
  r.loss_sum = loss_head(model, p.x.data(), p.rows, batch.targets, 1.0, nullptr);
  return r;
}

std::vector<float> forward_logits(LlamaModel& model, const TrainBatch& batch) {
  const ModelConfig& c = model.config();
  Prepared p = prepare(model, batch);
  forward_layers(model, p, batch);
  std::vector<float> h(p.x.size()), rstd(static_cast<size_t>(p.N));  // (N, C), (N)
  std::vector<float> logits(static_cast<size_t>(p.N * c.vocab_size));  // (N, V)
  ops::rmsnorm_forward(h.data(), rstd.data(), p.x.data(), model.weights().final_norm.data(), p.N,
                       c.hidden_size, static_cast<float>(c.rms_norm_eps));
  ops::linear_forward(logits.data(), h.data(), model.weights().lm_head, nullptr, p.N);
  return logits;
}

}  // namespace medtune::model
