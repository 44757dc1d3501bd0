#include "model/train_step.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/quant.h"
#include "model/layer.h"
#include "model/lora_flat.h"
#include "model/rope.h"
#include "model/row_shards.h"
#include "ops/backward.h"
#include "ops/ops.h"

namespace medtune::model {

namespace {

// Target rows' logits are computed this many at a time, so (rows, V) logits never exist for
// the whole batch: 256 x 49152 x 4 B = 48 MiB for SmolLM2.
constexpr int64_t kLossChunk = 256;

// A batch made ready for the layers, in the memory of the model's backend.
struct Prepared {
  int64_t N = 0;
  backend::Array<float> x;            // (N, C) embeddings, then the residual stream
  backend::Array<float> cos, sin;     // (N, HD/2)
  std::vector<uint8_t> valid;         // (B, T) host
  std::vector<int64_t> rows;          // host: flat indices of positions with a target
  backend::Array<int64_t> seg_start;  // (B, T) packed rows: t - positions[t]; empty = not packed

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
  backend::Backend& be = model.backend();
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
  for (int64_t n = 0; n < p.N; ++n) {
    const int32_t id = b.ids[static_cast<size_t>(n)];
    if (id < 0 || id >= V) throw BadInput("token id " + std::to_string(id) + " is outside the vocabulary");
    const int64_t t = b.targets[static_cast<size_t>(n)];
    if (t >= V) throw BadInput("target id " + std::to_string(t) + " is outside the vocabulary");
    if (t >= 0) p.rows.push_back(n);
  }
  p.x.fit(be, static_cast<size_t>(p.N * C));
  be.embedding(p.x.data(), w.embed, b.ids.data(), p.N);
  std::vector<int64_t> positions = b.positions;
  if (positions.empty()) {
    positions.resize(static_cast<size_t>(p.N));
    for (int64_t n = 0; n < p.N; ++n) positions[static_cast<size_t>(n)] = n % b.T;
  } else {
    p.seg_start.upload(be, segment_starts(b));
  }
  std::vector<float> cos(static_cast<size_t>(p.N * c.head_dim / 2)), sin(cos.size());  // (N, HD/2)
  rope_tables(model.inv_freq(), positions.data(), p.N, cos.data(), sin.data());
  p.cos.upload(be, cos);
  p.sin.upload(be, sin);
  p.valid = b.mask.empty() ? std::vector<uint8_t>(static_cast<size_t>(p.N), 1) : b.mask;
  return p;
}

// Final norm + lm_head + cross-entropy over the target rows, chunked, on the model's backend.
// With dx non-null also the backward: dx (N, C) receives dL/dx_final at the target rows (the
// caller zeroes the others).
double loss_head(const LlamaModel& model, const float* x, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& targets, double scale, float* dx) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  backend::Backend& be = model.backend();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  double loss = 0;
  const int64_t R = static_cast<int64_t>(rows.size());
  backend::Array<float> xin, h, rstd, logits, dh, dxin;
  std::vector<int64_t> tgt;
  for (int64_t r0 = 0; r0 < R; r0 += kLossChunk) {
    const int64_t n = std::min(kLossChunk, R - r0);
    const int64_t* chunk = rows.data() + r0;  // (n) host
    xin.fit(be, static_cast<size_t>(n * C));     // (n, C)
    h.fit(be, xin.size());                       // (n, C)
    rstd.fit(be, static_cast<size_t>(n));
    tgt.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tgt[static_cast<size_t>(i)] = targets[static_cast<size_t>(chunk[i])];
    be.gather_rows(xin.data(), x, chunk, n, C);
    be.rmsnorm_forward(h.data(), rstd.data(), xin.data(), w.final_norm.data(), n, C, eps);
    if (dx == nullptr) {
      logits.fit(be, static_cast<size_t>(n * V));  // (n, V)
      be.linear_forward(logits.data(), h.data(), w.lm_head, nullptr, n);
      loss += be.cross_entropy_sum(logits.data(), tgt.data(), n, V).sum;
      continue;
    }
    dh.fit(be, h.size());
    if (const auto fused = be.lm_head_loss_backward(dh.data(), h.data(), w.lm_head, tgt.data(), n,
                                                    static_cast<float>(scale))) {
      loss += fused->sum;
    } else {
      logits.fit(be, static_cast<size_t>(n * V));  // (n, V)
      be.linear_forward(logits.data(), h.data(), w.lm_head, nullptr, n);
      // Loss and gradient in one pass over the logits (the gradient overwrites them).
      const ops::LossSum sum = be.cross_entropy_loss_backward(
          logits.data(), logits.data(), tgt.data(), n, V, static_cast<float>(scale));
      loss += sum.sum;
      be.linear_backward_input(dh.data(), logits.data(), w.lm_head, n, false);
    }
    dxin.fit(be, h.size());
    be.rmsnorm_backward(dxin.data(), dh.data(), xin.data(), w.final_norm.data(), rstd.data(), n, C);
    be.scatter_rows(dx, dxin.data(), chunk, n, C);
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

// The arena's cache for this batch, of `layers` layers: reused when the shape matches. The
// training forward overwrites positions [0, T) of every row of a layer before anything reads them.
KvCache& training_cache(const ModelConfig& c, int64_t B, int64_t T, int64_t layers,
                        backend::Backend& be) {
  KvCache& cache = step_arena().cache;
  if (cache.L != layers || cache.B != B || cache.Smax != T || cache.NKV != c.num_key_value_heads ||
      cache.HD != c.head_dim || cache.k.backend() != &be) {
    cache = KvCache();  // the old one's memory goes back before the new one's is taken
    cache = KvCache(c, B, T, be, DType::F32, layers);
  }
  return cache;
}

int64_t acts_bytes(const LayerActs& a) { return a.bytes(); }

// The adapter's gradient accumulators on a device backend, when the caller gives none: one zeroed
// array of every dA and dB (model/lora_flat.h), added into the host dA, dB (where the ranks'
// exchange reads them) after the pass with one download, not one per matrix (a few hundred
// small copies a pass). On the CPU none are needed: the layers accumulate into dA, dB directly.
class DeviceGrads {
 public:
  DeviceGrads(backend::Backend& be, const LoraWeights& lora) : layout_(lora) {
    flat_.fit(be, static_cast<size_t>(layout_.total()));
    flat_.zero();
    table_ = layout_.grad_table(lora, flat_.data());
  }
  const std::vector<std::array<LoraGrad, kNumProj>>* table() const { return &table_; }
  // dA += the device's dA, dB likewise (host, in fp32 as the CPU accumulates micro-batches).
  void add_to_host(LoraWeights& lora) const {
    const std::vector<float> d = flat_.download();
    size_t i = 0;
    for (auto& layer : lora.layers)
      for (LoraLinear& ll : layer) {
        if (!ll.enabled()) continue;
        for (std::vector<float>* g : {&ll.dA, &ll.dB}) {
          const float* src = d.data() + layout_.offset(i++);
          for (size_t j = 0; j < g->size(); ++j) (*g)[j] += src[j];
        }
      }
  }

 private:
  LoraFlatLayout layout_;
  backend::Array<float> flat_;  // (layout_.total()) every dA and dB
  std::vector<std::array<LoraGrad, kNumProj>> table_;
};

}  // namespace

namespace detail {
TrainStepResult forward_backward_one_pass(LlamaModel& model, LoraWeights& lora, const TrainBatch& batch,
                                          const TrainOptions& opt, int64_t row0) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  backend::Backend& be = model.backend();
  const bool on_cpu = be.device().is_cpu();
  const int64_t L = c.num_hidden_layers, C = c.hidden_size;
  PhaseClock clock;
  StepTimes times;
  // A device reads a trainer's device copy of A and B (LoraLinear::device_A), or a resident copy
  // of the host matrices, which the optimizer may have changed since the last pass: made afresh.
  if (!on_cpu)
    for (const auto& layer : lora.layers)
      for (const LoraLinear& ll : layer) {
        be.forget(ll.A.data());
        be.forget(ll.B.data());
      }
  if (opt.device_grads != nullptr && on_cpu)
    throw Internal("forward_backward: device gradient buffers given for a pass on the CPU");
  std::optional<DeviceGrads> device_grads;  // the pass's own, when the caller gives none
  if (!on_cpu && opt.device_grads == nullptr) device_grads.emplace(be, lora);
  Prepared p = prepare(model, batch);
  // Keys and values: attention backward reads the layer's own. Every layer's are kept from the
  // forward; with checkpointing the recomputed forward writes them just before the backward
  // reads them, so one layer's do (a Llama-2-7B step of 8 x 512 tokens: 128 MiB, not 4 GiB).
  const int64_t kv_layers = opt.gradient_checkpointing ? 1 : L;
  KvCache& cache = training_cache(c, batch.B, batch.T, kv_layers, be);
  std::copy(p.valid.begin(), p.valid.end(), cache.valid.begin());
  backend::Array<uint8_t> valid;  // (B, T) on be
  valid.upload(be, cache.valid);
  const ops::AttentionShape shape{batch.B, batch.T, 0, batch.T, c.num_attention_heads,
                                  c.num_key_value_heads, c.head_dim};
  // The loss head reads the last layer's output only at the target rows, so that layer's
  // row-local part (o_proj, MLP) runs on those rows alone (layer.h: LayerCall::out_rows); no gain
  // when every row has a target.
  // (The CPU backend's policy: another backend's attention backward needs every row, layer.h.)
  const int64_t R = static_cast<int64_t>(p.rows.size());
  const bool rows_only = on_cpu && opt.last_layer_rows_only && R > 0 && R < p.N;
  auto call_for = [&](int64_t l) {
    LayerCall call{be, c, w.layers[static_cast<size_t>(l)], l, w.qk_rows_permuted, &lora,
                   opt.dropout_seed, true, shape, p.cos.data(), p.sin.data(),
                   cache.layer_k(l % kv_layers), cache.layer_v(l % kv_layers), valid.data(),
                   p.segments()};
    if (rows_only && l == L - 1) call.out_rows = &p.rows;
    call.need_input_grad = l > 0;  // the embedding is frozen: nothing reads layer 0's dL/dx_in
    call.row0 = row0;
    if (opt.device_grads != nullptr) call.grads = opt.device_grads;
    if (device_grads) call.grads = device_grads->table();
    return call;
  };

  // Forward, keeping every layer's activations, or only its input with checkpointing.
  std::vector<LayerActs>& saved = step_arena().saved;
  saved.resize(static_cast<size_t>(opt.gradient_checkpointing ? 1 : L));
  // With checkpointing: each layer's input (N, C), on be.
  std::vector<backend::Array<float>> inputs(static_cast<size_t>(opt.gradient_checkpointing ? L : 0));
  int64_t act_bytes = 0;
  for (int64_t l = 0; l < L; ++l) {
    LayerActs& a = saved[static_cast<size_t>(opt.gradient_checkpointing ? 0 : l)];
    a.resize(be, c, p.N, &lora, l, /*for_backward=*/true);
    if (opt.gradient_checkpointing) {
      backend::Array<float>& in = inputs[static_cast<size_t>(l)];
      in.fit(be, p.x.size());
      be.copy(in.data(), p.x.data(), p.x.bytes());
    }
    layer_forward(call_for(l), p.x.data(), a);
    act_bytes += opt.gradient_checkpointing ? static_cast<int64_t>(p.x.bytes()) : acts_bytes(a);
  }

  // p.x = the last layer's output, at the target rows only when rows_only (the loss head reads
  // nothing else). The layers' temporaries are not held through the loss head's peak.
  release_backward_scratch();
  times.forward = clock.lap();
  TrainStepResult result;
  result.tokens = static_cast<int64_t>(p.rows.size());
  backend::Array<float> dx(be, static_cast<size_t>(p.N * C));  // (N, C) dL/dx
  dx.zero();
  result.loss_sum = loss_head(model, p.x.data(), p.rows, batch.targets, opt.loss_scale, dx.data());
  times.loss_head = clock.lap();

  for (int64_t l = L - 1; l >= 0; --l) {
    LayerActs& a = saved[static_cast<size_t>(opt.gradient_checkpointing ? 0 : l)];
    if (opt.gradient_checkpointing) {  // recompute this layer's activations from its input
      // (into p.x, free since the loss head: layer_forward overwrites its input with its output)
      be.copy(p.x.data(), inputs[static_cast<size_t>(l)].data(), p.x.bytes());
      LayerCall recompute = call_for(l);
      recompute.output_needed = false;  // the backward reads the activations, not the output
      layer_forward(recompute, p.x.data(), a);
    }
    layer_backward(call_for(l), dx.data(), a);
  }
  // Allocated once for the 30 layers above; not held until the next step's loss head.
  release_backward_scratch();
  if (device_grads) device_grads->add_to_host(lora);
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
  backend::Backend& be = model.backend();
  // One layer's keys and values, reused by every layer: nothing reads a layer's after its own call.
  KvCache cache(c, batch.B, batch.T, be, DType::F32, /*layers=*/1);
  std::copy(p.valid.begin(), p.valid.end(), cache.valid.begin());
  backend::Array<uint8_t> valid;  // (B, T) on be
  valid.upload(be, cache.valid);
  const ops::AttentionShape shape{batch.B, batch.T, 0, batch.T, c.num_attention_heads,
                                  c.num_key_value_heads, c.head_dim};
  LayerActs a;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    a.resize(be, c, p.N, model.lora(), l);
    LayerCall call{be, c, w.layers[static_cast<size_t>(l)], l, w.qk_rows_permuted, model.lora(),
                   0, false, shape, p.cos.data(), p.sin.data(), cache.layer_k(0),
                   cache.layer_v(0), valid.data(), p.segments()};
    call.keep_for_backward = false;
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
  backend::Backend& be = model.backend();
  Prepared p = prepare(model, batch);
  forward_layers(model, p, batch);
  backend::Array<float> h(be, p.x.size()), rstd(be, static_cast<size_t>(p.N));  // (N, C), (N)
  backend::Array<float> logits(be, static_cast<size_t>(p.N * c.vocab_size));    // (N, V)
  be.rmsnorm_forward(h.data(), rstd.data(), p.x.data(), model.weights().final_norm.data(), p.N,
                     c.hidden_size, static_cast<float>(c.rms_norm_eps));
  be.linear_forward(logits.data(), h.data(), model.weights().lm_head, nullptr, p.N);
  return logits.download();
}

}  // namespace medtune::model
