#include "model/layer_ragged.h"

#include <array>
#include <initializer_list>
#include <utility>

#include "model/lora_linear.h"
#include "ops/ops.h"

namespace medtune::model {

void RaggedActs::resize(backend::Backend& be, const ModelConfig& c, int64_t N) {
  const auto n = [&](int64_t width) { return static_cast<size_t>(N * width); };
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * c.head_dim, KVD = c.num_key_value_heads * c.head_dim;
  for (Buf* b : {&n1, &n2, &proj}) b->fit(be, n(C));
  for (Buf* b : {&q, &att}) b->fit(be, n(QD));
  for (Buf* b : {&k, &v}) b->fit(be, n(KVD));
  for (Buf* b : {&gate, &up, &h}) b->fit(be, n(F));
}

namespace {

const float* bias_or_null(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }

// Each adapter segment's LoRA part of the projections that read `in` (N rows, `in_dim` wide):
// y_p[rows] += s B_p (A_p in[rows]), the projections of one segment stacked as in layer_forward.
void lora_add(const RaggedLayerCall& call, const float* in, int64_t in_dim,
              std::initializer_list<std::pair<float*, Proj>> outs) {
  for (const LoraSegment& seg : call.loras) {
    if (seg.lora == nullptr || seg.rows == 0) continue;
    std::array<LoraGroupForward, 3> group{};
    int n = 0;
    for (const auto& [y, p] : outs) {
      const LoraLinear& l = seg.lora->at(call.layer, p);
      if (l.enabled()) group[static_cast<size_t>(n++)] = {&l, y + seg.row0 * l.out, nullptr};
    }
    if (n > 0) lora_group_forward(call.be, group.data(), n, in + seg.row0 * in_dim, seg.lora->scaling, seg.rows);
  }
}

}  // namespace

void layer_forward_ragged(const RaggedLayerCall& call, float* x, RaggedActs& a) {
  backend::Backend& be = call.be;
  const ModelConfig& c = call.config;
  const LayerWeights& w = call.w;
  const int64_t N = call.runs.empty() ? 0 : call.runs.back().row0 + call.runs.back().T;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const int64_t QD = NH * HD, KVD = NKV * HD;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // --- attention block
  be.rmsnorm_forward(a.n1.data(), nullptr, x, w.input_norm.data(), N, C, eps);
  const std::array<ops::LinearOut, 3> qkv{{{a.q.data(), &w.q, bias_or_null(w.q_bias)},
                                          {a.k.data(), &w.k, bias_or_null(w.k_bias)},
                                          {a.v.data(), &w.v, bias_or_null(w.v_bias)}}};
  be.linear_forward_group(qkv.data(), 3, a.n1.data(), N);
  if (call.qk_rows_permuted) {
    be.undo_gguf_qk_permutation(a.q.data(), N, NH, HD);
    be.undo_gguf_qk_permutation(a.k.data(), N, NKV, HD);
  }
  lora_add(call, a.n1.data(), C, {{a.q.data(), Proj::q}, {a.k.data(), Proj::k}, {a.v.data(), Proj::v}});
  be.rope_forward(a.q.data(), call.cos, call.sin, N, NH, HD);
  be.rope_forward(a.k.data(), call.cos, call.sin, N, NKV, HD);
  // Per sequence: its keys and values into its slot, then its queries against that slot alone,
  // as one batch row (B = 1) at its own past: the shape a sequence has when it runs alone.
  for (const SeqRun& r : call.runs) {
    const int64_t at = (r.slot * call.Smax + r.past) * KVD;  // the slot's position `past`
    store_kv(be, call.k_cache.at(at), KVD, a.k.data() + r.row0 * KVD, KVD, r.T, KVD);
    store_kv(be, call.v_cache.at(at), KVD, a.v.data() + r.row0 * KVD, KVD, r.T, KVD);
  }
  const auto attend = [&](const SeqRun& r) {
    const ops::AttentionShape shape{1, r.T, r.past, call.Smax, NH, NKV, HD};
    attention_over_cache(be, a.att.data() + r.row0 * QD, nullptr, a.q.data() + r.row0 * QD,
                         call.k_cache.at(r.slot * call.Smax * KVD), call.v_cache.at(r.slot * call.Smax * KVD),
                         call.key_valid + r.slot * call.Smax, nullptr, shape);
  };
  const auto runs = static_cast<int64_t>(call.runs.size());
  if (be.device().is_cpu() && runs > 1) {
    // On the CPU the sequences' attentions run side by side, one per thread (the CPU backend's ops
    // may be called from several threads: backend.h), instead of one threaded call each: 16 decode
    // steps would otherwise open 16 thread teams per layer. A sequence's heads then run one after
    // another on its thread, each head the same arithmetic as in a threaded call (BLAS runs
    // single-threaded inside a parallel region either way).
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < runs; ++i) attend(call.runs[static_cast<size_t>(i)]);
  } else {
    for (const SeqRun& r : call.runs) attend(r);
  }
  be.linear_forward(a.proj.data(), a.att.data(), w.o, bias_or_null(w.o_bias), N);
  lora_add(call, a.att.data(), QD, {{a.proj.data(), Proj::o}});
  be.add_inplace(x, a.proj.data(), N * C);  // x_mid, in x (nothing reads x_in again)

  // --- MLP block
  be.rmsnorm_forward(a.n2.data(), nullptr, x, w.post_attn_norm.data(), N, C, eps);
  // h in one pass where the backend has one and no segment's adapter adds to gate or up.
  bool gate_up_adapted = false;
  for (const LoraSegment& seg : call.loras)
    for (const Proj p : {Proj::gate, Proj::up})
      gate_up_adapted = gate_up_adapted || (seg.lora != nullptr && seg.rows > 0 &&
                                            seg.lora->at(call.layer, p).enabled());
  if (gate_up_adapted || !be.linear_swiglu_forward(a.h.data(), a.n2.data(), w.gate, w.up, N)) {
    const std::array<ops::LinearOut, 2> gate_up{
        {{a.gate.data(), &w.gate, nullptr}, {a.up.data(), &w.up, nullptr}}};
    be.linear_forward_group(gate_up.data(), 2, a.n2.data(), N);
    lora_add(call, a.n2.data(), C, {{a.gate.data(), Proj::gate}, {a.up.data(), Proj::up}});
    be.swiglu_forward(a.h.data(), a.gate.data(), a.up.data(), N * F);
  }
  be.linear_forward(a.proj.data(), a.h.data(), w.down, nullptr, N);
  lora_add(call, a.h.data(), F, {{a.proj.data(), Proj::down}});
  // x_out = x_mid + down_proj(...): the same fp32 sums as layer_forward's (addition commutes).
  be.add_inplace(x, a.proj.data(), N * C);
}

}  // namespace medtune::model
