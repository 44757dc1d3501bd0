#include "model/layer.h"

#include <array>
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"

namespace medtune::model {

namespace {

const float* bias_or_null(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }

// The layer's temporaries (~30 MB per layer for the backward at 4 x 256 tokens), kept from one
// call to the next so that they are not zero-filled and page-faulted in again 30 times a step:
// glibc hands buffers this large back to the kernel when freed. One set per calling thread, on
// the backend of the last call; each slot holds one temporary, grown as needed, garbage on entry
// (every user writes it before reading it). layer_forward uses kXd, kK, kV, kProj, kH;
// layer_backward the others, kXd and kH. release_backward_scratch() frees them, so that they do not add to the loss
// head's peak.
//
// Temporaries that are never live at once share a slot (planned in model/row_shards.cpp): the
// forward's are dead once it returns, before any backward runs (also the recomputed forward of
// checkpointing); the attention block's gradients are taken after the MLP block's last read of
// dh, dgate and dup (the gate/up LoRA backward). A Llama-2-7B step of 8 x 512 tokens holds 384
// MiB less.
enum Slot : size_t {
  kDu, kXd, kDxRows, kDh, kDgate, kDup, kDn, kDnormIn, kDattRows, kDv, kDqBase, kDkBase, kNumSlots,
  kK = kDv, kV = kDnormIn, kProj = kDn,      // forward: k, v, the o_proj/down_proj output,
  kH = kDgate,                                // silu(gate) * up (also made again in backward)
  kDatt = kDh, kDq = kDgate, kDk = kDup,      // attention backward, after the MLP backward
};
std::array<backend::Array<float>, kNumSlots>& backward_scratch() {
  thread_local std::array<backend::Array<float>, kNumSlots> bufs;
  return bufs;
}
float* scratch(backend::Backend& be, Slot slot, int64_t n) {
  backend::Array<float>& b = backward_scratch()[slot];
  if (b.backend() != &be || b.size() < static_cast<size_t>(n)) b.fit(be, static_cast<size_t>(n));
  return b.data();
}

}  // namespace

bool mlp_input_adapted(const LoraWeights* lora, int64_t layer) {
  return lora != nullptr &&
         (lora->at(layer, Proj::gate).enabled() || lora->at(layer, Proj::up).enabled());
}

void LayerActs::resize(backend::Backend& be, const ModelConfig& c, int64_t N, const LoraWeights* lora,
                       int64_t layer, bool for_backward) {
  // A reused buffer (training keeps activations from step to step) is overwritten before it is
  // read, so its old contents are never copied.
  const auto fit = [&](Buf& b, size_t n) { b.fit(be, n); };
  const auto n = [&](int64_t k) { return static_cast<size_t>(N * k); };
  const int64_t C = c.hidden_size, F = c.intermediate_size, QD = c.num_attention_heads * c.head_dim;
  fit(x_in, n(C));
  fit(n1, n(C));
  fit(rstd1, n(1));
  fit(q, n(QD));
  fit(att, n(QD));
  fit(x_mid, n(C));
  fit(n2, !for_backward || mlp_input_adapted(lora, layer) ? n(C) : 0);
  fit(rstd2, n(1));
  fit(gate, n(F));
  fit(up, n(F));
  for (int p = 0; p < kNumProj; ++p) {
    const int64_t r = lora != nullptr ? lora->at(layer, static_cast<Proj>(p)).r : 0;
    fit(lora_u[static_cast<size_t>(p)], n(r));
  }
  // The attention's logsumexp, for backends whose attention backward reads it (not the CPU's).
  fit(lse, be.device().is_cpu() ? 0 : n(c.num_attention_heads));
}

int64_t LayerActs::bytes() const {
  int64_t n = 0;
  for (const Buf* b : {&x_in, &n1, &rstd1, &q, &att, &x_mid, &n2, &rstd2, &gate, &up, &lse})
    n += static_cast<int64_t>(b->bytes());
  for (const Buf& u : lora_u) n += static_cast<int64_t>(u.bytes());
  return n;
}

void release_backward_scratch() {
  for (auto& b : backward_scratch()) b = backend::Array<float>();
}

DropoutSite LayerCall::dropout(Proj p) const {
  if (!training || lora == nullptr || lora->config.dropout <= 0) return {};
  DropoutSite d{static_cast<float>(lora->config.dropout), dropout_seed,
                static_cast<uint64_t>(layer * kNumProj + static_cast<int>(p))};
  d.row0 = row0;
  // o, gate, up, down run after attention: on out_rows only, with those rows' masks.
  if (restricted() && static_cast<int>(p) >= static_cast<int>(Proj::o)) d.rows = out_rows->data();
  return d;
}

int64_t LayerCall::rows_after_attention() const {
  return restricted() ? static_cast<int64_t>(out_rows->size()) : shape.B * shape.T;
}

const LoraLinear* LayerCall::lora_at(Proj p) const {
  return lora != nullptr ? &lora->at(layer, p) : nullptr;
}
LoraLinear* LayerCall::lora_at(Proj p) { return lora != nullptr ? &lora->at(layer, p) : nullptr; }

LoraGrad LayerCall::grad_at(Proj p) const {
  if (lora == nullptr) return {};
  if (grads != nullptr) return (*grads)[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  if (!be.device().is_cpu())
    throw Internal("layer_backward on " + be.device().str() + " needs gradient buffers on that device (LayerCall::grads)");
  return host_grads(lora->at(layer, p));
}

namespace {
// out_rows as a pointer for the row-local part (null = all rows), checked: ascending, in [0, N).
const int64_t* checked_rows(const LayerCall& call) {
  if (!call.restricted()) return nullptr;
  const std::vector<int64_t>& rows = *call.out_rows;
  const int64_t N = call.shape.B * call.shape.T;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= N || (i > 0 && rows[i] <= rows[i - 1]))
      throw Internal("LayerCall::out_rows must be ascending row indices in [0, B*T)");
  return rows.data();
}
}  // namespace

void layer_forward(const LayerCall& call, float* x, LayerActs& a) {
  backend::Backend& be = call.be;
  const ModelConfig& c = call.config;
  const LayerWeights& w = call.w;
  const ops::AttentionShape& s = call.shape;
  const int64_t N = s.B * s.T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const int64_t QD = NH * HD, KVD = NKV * HD;
  const int64_t M = call.rows_after_attention();  // rows from o_proj on: R with out_rows, else N
  const int64_t* rows = checked_rows(call);       // (M) or null = row i is row i
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float sc = call.lora != nullptr ? call.lora->scaling : 0.0f;
  float* k = scratch(be, kK, N * KVD);  // (N, NKV, HD)
  float* v = scratch(be, kV, N * KVD);  // (N, NKV, HD)
  float* proj = scratch(be, kProj, M * C);  // (M, C) o_proj, then down_proj output
  // Dropout scratch, (N, max(C, F)), used only when dropout is on.
  float* xd = call.dropout(Proj::q).p > 0 ? scratch(be, kXd, N * std::max(C, F)) : nullptr;
  auto u = [&](Proj p) { return a.lora_u[static_cast<size_t>(p)].data(); };
  // LoRA parts of the projections that read `in` (m rows): those without dropout as one stacked
  // group (lora_group_forward), the others one by one.
  auto lora_add = [&](const float* in, int64_t m, std::initializer_list<std::pair<float*, Proj>> outs) {
    std::array<LoraGroupForward, 3> group{};
    int n = 0;
    for (const auto& [y, p] : outs) {
      const LoraLinear* l = call.lora_at(p);
      if (l == nullptr || !l->enabled()) continue;
      const DropoutSite d = call.dropout(p);
      if (d.p > 0) lora_forward_add(be, y, in, *l, sc, d, u(p), xd, m);
      else group[static_cast<size_t>(n++)] = {l, y, u(p)};
    }
    if (n > 0) lora_group_forward(be, group.data(), n, in, sc, m);
  };

  if (call.keep_for_backward)
    be.copy(a.x_in.data(), x, static_cast<size_t>(N * C) * sizeof(float));
  // --- attention block
  be.rmsnorm_forward(a.n1.data(), a.rstd1.data(), x, w.input_norm.data(), N, C, eps);
  const std::array<ops::LinearOut, 3> qkv{{{a.q.data(), &w.q, bias_or_null(w.q_bias)},
                                          {k, &w.k, bias_or_null(w.k_bias)},
                                          {v, &w.v, bias_or_null(w.v_bias)}}};
  be.linear_forward_group(qkv.data(), 3, a.n1.data(), N);
  if (call.qk_rows_permuted) {
    be.undo_gguf_qk_permutation(a.q.data(), N, NH, HD);
    be.undo_gguf_qk_permutation(k, N, NKV, HD);
  }
  lora_add(a.n1.data(), N, {{a.q.data(), Proj::q}, {k, Proj::k}, {v, Proj::v}});
  be.rope_forward(a.q.data(), call.cos, call.sin, N, NH, HD);
  be.rope_forward(k, call.cos, call.sin, N, NKV, HD);
  // Append keys and values: (B, T, NKV, HD) -> cache (B, Smax, NKV, HD) at position past, each
  // batch row's T*KVD elements as one strided row (in the cache's type: store_kv).
  store_kv(be, call.k_cache.at(s.past * KVD), s.Smax * KVD, k, s.T * KVD, s.B, s.T * KVD);
  store_kv(be, call.v_cache.at(s.past * KVD), s.Smax * KVD, v, s.T * KVD, s.B, s.T * KVD);
  attention_over_cache(be, a.att.data(), a.lse.empty() ? nullptr : a.lse.data(), a.q.data(), call.k_cache,
                       call.v_cache, call.key_valid, call.seg_start, s);

  // Everything below is row-local. With out_rows it runs on those M rows only, packed into the
  // first M rows of att, x_mid, n2, ... (att in place: rows ascend, so rows[i] >= i). Without a
  // backward and without out_rows, x itself holds x_mid.
  const bool x_is_mid = !call.keep_for_backward && rows == nullptr;
  float* x_mid = x_is_mid ? x : a.x_mid.data();  // (M, C)
  if (rows != nullptr) {
    be.gather_rows(a.att.data(), a.att.data(), rows, M, QD);
    be.gather_rows(x_mid, x, rows, M, C);
  } else if (!x_is_mid) {
    be.copy(x_mid, x, static_cast<size_t>(M * C) * sizeof(float));
  }
  project_forward(be, proj, a.att.data(), w.o, bias_or_null(w.o_bias), call.lora_at(Proj::o), sc,
                  call.dropout(Proj::o), u(Proj::o), xd, M);
  be.add_inplace(x_mid, proj, M * C);

  // --- MLP block
  // rmsnorm(x_mid) (M, C): kept for backward when gate or up has an adapter (LayerActs::resize),
  // else in v's slot, dead since the keys and values went to the cache.
  float* n2 = a.n2.empty() ? scratch(be, kV, M * C) : a.n2.data();
  be.rmsnorm_forward(n2, a.rstd2.data(), x_mid, w.post_attn_norm.data(), M, C, eps);
  float* h = scratch(be, kH, M * F);  // (M, F)
  const LoraLinear* down = call.lora_at(Proj::down);
  const bool down_adapted = down != nullptr && down->enabled();
  const auto adapted = [&](Proj p) {
    const LoraLinear* l = call.lora_at(p);
    return l != nullptr && l->enabled();
  };
  // h in one pass where the backend has one and nothing else reads gate and up (no backward, no
  // adapter on them): the values of the steps below.
  const bool fused = call.output_needed && !call.keep_for_backward && !adapted(Proj::gate) &&
                     !adapted(Proj::up) && be.linear_swiglu_forward(h, n2, w.gate, w.up, M);
  if (!fused) {
    const std::array<ops::LinearOut, 2> gate_up{
        {{a.gate.data(), &w.gate, nullptr}, {a.up.data(), &w.up, nullptr}}};
    be.linear_forward_group(gate_up.data(), 2, n2, M);
    lora_add(n2, M, {{a.gate.data(), Proj::gate}, {a.up.data(), Proj::up}});
    if (!call.output_needed) {
      // What layer_backward reads from here on: down_proj's adapter input product u = A d(h) only.
      if (!down_adapted) return;
      be.swiglu_forward(h, a.gate.data(), a.up.data(), M * F);
      lora_forward_u(be, h, *down, call.dropout(Proj::down), u(Proj::down), xd, M);
      return;
    }
    be.swiglu_forward(h, a.gate.data(), a.up.data(), M * F);
  }
  project_forward(be, proj, h, w.down, nullptr, down, sc, call.dropout(Proj::down), u(Proj::down),
                  xd, M);
  // x_out = x_mid + down_proj(...), at the M rows (fp32 addition commutes: proj + x_mid is x_mid + proj).
  if (x_is_mid) {
    be.add_inplace(x, proj, M * C);
    return;
  }
  be.add_inplace(proj, x_mid, M * C);
  if (rows != nullptr) be.scatter_rows(x, proj, rows, M, C);
  else be.copy(x, proj, static_cast<size_t>(M * C) * sizeof(float));
}

void layer_backward(const LayerCall& call, float* dx, const LayerActs& a) {
  backend::Backend& be = call.be;
  const ModelConfig& c = call.config;
  const LayerWeights& w = call.w;
  const ops::AttentionShape& s = call.shape;
  if (s.past != 0 || s.Smax != s.T) throw Internal("layer_backward: training needs past == 0 and Smax == T");
  const int64_t N = s.B * s.T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const int64_t QD = NH * HD, KVD = NKV * HD;
  const int64_t M = call.rows_after_attention();  // rows of the row-local part (see layer_forward)
  const int64_t* rows = checked_rows(call);
  // A backend whose attention backward reads the forward's output needs all N rows of it, which
  // out_rows would have compacted away (the CPU's recomputes what it needs).
  if (rows != nullptr && !be.device().is_cpu())
    throw Internal("layer_backward: out_rows is for the CPU backend only");
  const float sc = call.lora != nullptr ? call.lora->scaling : 0.0f;
  int64_t rmax = 0;
  if (call.lora != nullptr)
    for (int p = 0; p < kNumProj; ++p) rmax = std::max(rmax, call.lora->at(call.layer, static_cast<Proj>(p)).r);
  float* du = scratch(be, kDu, N * std::max<int64_t>(rmax, 1));  // (N, r)
  // Dropout scratch, (N, max(C, F)), used only when dropout is on.
  float* xd = call.dropout(Proj::q).p > 0 ? scratch(be, kXd, N * std::max(C, F)) : nullptr;
  auto u = [&](Proj p) { return a.lora_u[static_cast<size_t>(p)].data(); };
  auto back = [&](float* dxp, const float* dy, const float* in, const ops::StoredMatrix& W, Proj p, int64_t m) {
    project_backward(be, dxp, dy, dy, in, W, call.lora_at(p), call.grad_at(p), sc, call.dropout(p), u(p),
                     du, xd, m, false);
  };
  // LoRA parts of the projections that read `in` (m rows), as in layer_forward's lora_add; dxp
  // null: no input gradient.
  auto lora_back = [&](float* dxp, const float* in, int64_t m,
                       std::initializer_list<std::pair<const float*, Proj>> dys) {
    std::array<LoraGroupBackward, 3> group{};
    int n = 0;
    for (const auto& [dy, p] : dys) {
      const LoraLinear* l = call.lora_at(p);
      if (l == nullptr || !l->enabled()) continue;
      const DropoutSite d = call.dropout(p);
      if (d.p > 0) lora_backward(be, dxp, dy, in, *l, call.grad_at(p), sc, d, u(p), du, xd, m);
      else group[static_cast<size_t>(n++)] = {l, call.grad_at(p), dy, u(p)};
    }
    if (n > 0) lora_group_backward(be, dxp, group.data(), n, in, sc, m);
  };

  // --- MLP block, on the M rows of the row-local part. dxm (M, C) holds dL/dx_out =
  // dL/dx_mid (residual) + the MLP branch's share: dx itself, or dx's out_rows gathered.
  float* dxm = dx;
  if (rows != nullptr) {
    dxm = scratch(be, kDxRows, M * C);
    be.gather_rows(dxm, dx, rows, M, C);
  }
  float* dh = scratch(be, kDh, M * F);  // (M, F)
  // down_proj's input made again where its adapter's gradient reads it (the base's input
  // gradient does not), in the slot dgate takes next.
  const LoraLinear* down = call.lora_at(Proj::down);
  float* h = nullptr;
  if (down != nullptr && down->enabled()) {
    h = scratch(be, kH, M * F);
    be.swiglu_forward(h, a.gate.data(), a.up.data(), M * F);
  }
  back(dh, dxm, h, w.down, Proj::down, M);
  float* dgate = scratch(be, kDgate, M * F);  // (M, F)
  float* dup = scratch(be, kDup, M * F);      // (M, F)
  be.swiglu_backward(dgate, dup, dh, a.gate.data(), a.up.data(), M * F);
  float* dn = scratch(be, kDn, N * C);  // (N, C) gradient of a norm's output (first M rows here)
  be.linear_backward_input(dn, dgate, w.gate, M, false);
  be.linear_backward_input(dn, dup, w.up, M, true);
  lora_back(dn, a.n2.data(), M, {{dgate, Proj::gate}, {dup, Proj::up}});
  float* dnorm_in = scratch(be, kDnormIn, N * C);  // (N, C)
  be.rmsnorm_backward(dnorm_in, dn, a.x_mid.data(), w.post_attn_norm.data(), a.rstd2.data(), M, C);
  be.add_inplace(dxm, dnorm_in, M * C);  // dxm = dL/dx_mid

  // --- attention block
  float* datt = scratch(be, kDatt, N * QD);  // (N, NH, HD)
  if (rows == nullptr) {
    back(datt, dx, a.att.data(), w.o, Proj::o, N);
  } else {
    // o_proj's backward on the M rows, then datt and dx = dL/dx_mid scattered back to all N
    // rows: zero outside out_rows (dL/dx_out was zero there and o_proj never saw those rows).
    float* datt_rows = scratch(be, kDattRows, M * QD);  // (M, NH, HD)
    back(datt_rows, dxm, a.att.data(), w.o, Proj::o, M);
    be.zero(datt, static_cast<size_t>(N * QD) * sizeof(float));
    be.scatter_rows(datt, datt_rows, rows, M, QD);
    be.scatter_rows(dx, dxm, rows, M, C);
  }
  float* dq = scratch(be, kDq, N * QD);   // (N, NH, HD)
  float* dk = scratch(be, kDk, N * KVD);  // (N, NKV, HD)
  float* dv = scratch(be, kDv, N * KVD);  // (N, NKV, HD)
  be.attention_backward(dq, dk, dv, datt, a.att.data(), a.lse.empty() ? nullptr : a.lse.data(), a.q.data(),
                        call.k_cache.f32(), call.v_cache.f32(), call.key_valid, call.seg_start, s);
  be.rope_backward(dq, call.cos, call.sin, N, NH, HD);
  be.rope_backward(dk, call.cos, call.sin, N, NKV, HD);
  if (call.need_input_grad) {
    // The base projections of q and k produced GGUF-ordered rows when permuted.
    const float* dq_w = dq;
    const float* dk_w = dk;
    if (call.qk_rows_permuted) {
      float* dq_base = scratch(be, kDqBase, N * QD);   // (N, NH, HD) GGUF order
      float* dk_base = scratch(be, kDkBase, N * KVD);  // (N, NKV, HD)
      be.copy(dq_base, dq, static_cast<size_t>(N * QD) * sizeof(float));
      be.copy(dk_base, dk, static_cast<size_t>(N * KVD) * sizeof(float));
      be.redo_gguf_qk_permutation(dq_base, N, NH, HD);
      be.redo_gguf_qk_permutation(dk_base, N, NKV, HD);
      dq_w = dq_base;
      dk_w = dk_base;
    }
    be.linear_backward_input(dn, dq_w, w.q, N, false);
    be.linear_backward_input(dn, dk_w, w.k, N, true);
    be.linear_backward_input(dn, dv, w.v, N, true);
  }
  // The LoRA gradients of q, k, v are wanted either way; their input gradient only with dx.
  lora_back(call.need_input_grad ? dn : nullptr, a.n1.data(), N, {{dq, Proj::q}, {dk, Proj::k}, {dv, Proj::v}});
  if (!call.need_input_grad) return;  // dx stays dL/dx_mid: unspecified to the caller
  be.rmsnorm_backward(dnorm_in, dn, a.x_in.data(), w.input_norm.data(), a.rstd1.data(), N, C);
  be.add_inplace(dx, dnorm_in, N * C);  // dx = dL/dx_in
}

}  // namespace medtune::model
