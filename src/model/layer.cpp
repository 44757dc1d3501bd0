#include "model/layer.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/backward.h"

namespace medtune::model {

namespace {

// Inverse of undo_gguf_qk_permutation: Hugging Face order back into GGUF order, so the
// gradient of a permuted output reaches the stored (permuted) rows.
void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) {
  const int64_t half = HD / 2;
  std::vector<float> tmp(static_cast<size_t>(HD));
  for (int64_t nh = 0; nh < N * H; ++nh) {
    float* head = x + nh * HD;
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) tmp[static_cast<size_t>(2 * i + j)] = head[j * half + i];
    std::memcpy(head, tmp.data(), static_cast<size_t>(HD) * sizeof(float));
  }
}

const float* bias_or_null(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }

// The backward's temporaries (~30 MB per layer at 4 x 256 tokens), kept from one layer to the
// next so that they are not zero-filled and page-faulted in again 30 times a step: glibc hands
// buffers this large back to the kernel when freed. One set per calling thread; each slot holds
// one temporary, grown as needed, garbage on entry (every user writes it before reading it).
// release_backward_scratch() frees them, so that they do not add to the loss head's peak.
enum Slot : size_t { kDu, kXd, kDh, kDgate, kDup, kDn, kDnormIn, kDatt, kDq, kDk, kDv, kNumSlots };
std::array<std::vector<float>, kNumSlots>& backward_scratch() {
  thread_local std::array<std::vector<float>, kNumSlots> bufs;
  return bufs;
}
float* scratch(Slot slot, int64_t n) {
  std::vector<float>& b = backward_scratch()[slot];
  if (b.size() < static_cast<size_t>(n)) {
    b.clear();  // no copy of the old contents
    b.resize(static_cast<size_t>(n));
  }
  return b.data();
}

}  // namespace

namespace {
// v.resize(n) that never copies old contents into a new allocation: a reused buffer (training
// keeps activations from step to step) is overwritten before it is read anyway.
void fit(std::vector<float>& v, size_t n) {
  if (v.capacity() < n) v.clear();
  v.resize(n);
}
}  // namespace

void LayerActs::resize(const ModelConfig& c, int64_t N, const LoraWeights* lora, int64_t layer) {
  const auto n = [&](int64_t k) { return static_cast<size_t>(N * k); };
  const int64_t C = c.hidden_size, F = c.intermediate_size, QD = c.num_attention_heads * c.head_dim;
  fit(x_in, n(C));
  fit(n1, n(C));
  fit(rstd1, n(1));
  fit(q, n(QD));
  fit(att, n(QD));
  fit(x_mid, n(C));
  fit(n2, n(C));
  fit(rstd2, n(1));
  fit(gate, n(F));
  fit(up, n(F));
  fit(h, n(F));
  for (int p = 0; p < kNumProj; ++p) {
    const int64_t r = lora != nullptr ? lora->at(layer, static_cast<Proj>(p)).r : 0;
    fit(lora_u[static_cast<size_t>(p)], n(r));
  }
}

void release_backward_scratch() {
  for (auto& b : backward_scratch()) std::vector<float>().swap(b);
}

DropoutSite LayerCall::dropout(Proj p) const {
  if (!training || lora == nullptr || lora->config.dropout <= 0) return {};
  return {static_cast<float>(lora->config.dropout), dropout_seed,
          static_cast<uint64_t>(layer * kNumProj + static_cast<int>(p))};
}

const LoraLinear* LayerCall::lora_at(Proj p) const {
  return lora != nullptr ? &lora->at(layer, p) : nullptr;
}
LoraLinear* LayerCall::lora_at(Proj p) { return lora != nullptr ? &lora->at(layer, p) : nullptr; }

void layer_forward(const LayerCall& call, float* x, LayerActs& a) {
  const ModelConfig& c = call.config;
  const LayerWeights& w = call.w;
  const ops::AttentionShape& s = call.shape;
  const int64_t N = s.B * s.T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float sc = call.lora != nullptr ? call.lora->scaling : 0.0f;
  std::vector<float> k(static_cast<size_t>(N * NKV * HD)), v(k.size());  // (N, NKV, HD)
  std::vector<float> xd;  // dropout scratch, (N, max(C, F)) when dropout is on
  if (call.dropout(Proj::q).p > 0) xd.resize(static_cast<size_t>(N * std::max(C, F)));
  auto u = [&](Proj p) { return a.lora_u[static_cast<size_t>(p)].data(); };
  auto lora_add = [&](float* y, const float* in, Proj p) {
    const LoraLinear* l = call.lora_at(p);
    if (l != nullptr && l->enabled()) lora_forward_add(y, in, *l, sc, call.dropout(p), u(p), xd.data(), N);
  };

  std::memcpy(a.x_in.data(), x, static_cast<size_t>(N * C) * sizeof(float));
  // --- attention block
  ops::rmsnorm_forward(a.n1.data(), a.rstd1.data(), x, w.input_norm.data(), N, C, eps);
  ops::linear_forward(a.q.data(), a.n1.data(), w.q, bias_or_null(w.q_bias), N);
  ops::linear_forward(k.data(), a.n1.data(), w.k, bias_or_null(w.k_bias), N);
  ops::linear_forward(v.data(), a.n1.data(), w.v, bias_or_null(w.v_bias), N);
  if (call.qk_rows_permuted) {
    undo_gguf_qk_permutation(a.q.data(), N, NH, HD);
    undo_gguf_qk_permutation(k.data(), N, NKV, HD);
  }
  lora_add(a.q.data(), a.n1.data(), Proj::q);
  lora_add(k.data(), a.n1.data(), Proj::k);
  lora_add(v.data(), a.n1.data(), Proj::v);
  ops::rope_forward(a.q.data(), call.cos, call.sin, N, NH, HD);
  ops::rope_forward(k.data(), call.cos, call.sin, N, NKV, HD);
  // Append keys and values: (B, T, NKV, HD) -> cache (B, Smax, NKV, HD) at position past.
  const int64_t row = NKV * HD;
  for (int64_t b = 0; b < s.B; ++b) {
    const size_t bytes = static_cast<size_t>(s.T * row) * sizeof(float);
    std::memcpy(call.k_cache + (b * s.Smax + s.past) * row, k.data() + b * s.T * row, bytes);
    std::memcpy(call.v_cache + (b * s.Smax + s.past) * row, v.data() + b * s.T * row, bytes);
  }
  ops::attention_forward(a.att.data(), a.q.data(), call.k_cache, call.v_cache, call.key_valid,
                         call.seg_start, s);
  std::memcpy(a.x_mid.data(), x, static_cast<size_t>(N * C) * sizeof(float));
  std::vector<float> proj(static_cast<size_t>(N * C));  // (N, C)
  project_forward(proj.data(), a.att.data(), w.o, bias_or_null(w.o_bias), call.lora_at(Proj::o), sc,
                  call.dropout(Proj::o), u(Proj::o), xd.data(), N);
  ops::add_inplace(a.x_mid.data(), proj.data(), N * C);

  // --- MLP block
  ops::rmsnorm_forward(a.n2.data(), a.rstd2.data(), a.x_mid.data(), w.post_attn_norm.data(), N, C, eps);
  project_forward(a.gate.data(), a.n2.data(), w.gate, nullptr, call.lora_at(Proj::gate), sc,
                  call.dropout(Proj::gate), u(Proj::gate), xd.data(), N);
  project_forward(a.up.data(), a.n2.data(), w.up, nullptr, call.lora_at(Proj::up), sc,
                  call.dropout(Proj::up), u(Proj::up), xd.data(), N);
  ops::swiglu_forward(a.h.data(), a.gate.data(), a.up.data(), N * F);
  project_forward(proj.data(), a.h.data(), w.down, nullptr, call.lora_at(Proj::down), sc,
                  call.dropout(Proj::down), u(Proj::down), xd.data(), N);
  for (int64_t i = 0; i < N * C; ++i) x[i] = a.x_mid[static_cast<size_t>(i)] + proj[static_cast<size_t>(i)];
}

void layer_backward(const LayerCall& call, float* dx, const LayerActs& a) {
  const ModelConfig& c = call.config;
  const LayerWeights& w = call.w;
  const ops::AttentionShape& s = call.shape;
  if (s.past != 0 || s.Smax != s.T) throw Internal("layer_backward: training needs past == 0 and Smax == T");
  const int64_t N = s.B * s.T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads, NKV = c.num_key_value_heads, HD = c.head_dim;
  const float sc = call.lora != nullptr ? call.lora->scaling : 0.0f;
  int64_t rmax = 0;
  if (call.lora != nullptr)
    for (int p = 0; p < kNumProj; ++p) rmax = std::max(rmax, call.lora->at(call.layer, static_cast<Proj>(p)).r);
  float* du = scratch(kDu, N * std::max<int64_t>(rmax, 1));  // (N, r)
  // Dropout scratch, (N, max(C, F)), used only when dropout is on.
  float* xd = call.dropout(Proj::q).p > 0 ? scratch(kXd, N * std::max(C, F)) : nullptr;
  auto u = [&](Proj p) { return a.lora_u[static_cast<size_t>(p)].data(); };
  auto back = [&](float* dxp, const float* dy_base, const float* dy, const float* in,
                  const ops::StoredMatrix& W, Proj p, bool acc) {
    project_backward(dxp, dy_base, dy, in, W, call.lora != nullptr ? &call.lora->at(call.layer, p) : nullptr,
                     sc, call.dropout(p), u(p), du, xd, N, acc);
  };

  // --- MLP block. dx holds dL/dx_out = dL/dx_mid (residual) + the MLP branch's share.
  float* dh = scratch(kDh, N * F);        // (N, F)
  float* dgate = scratch(kDgate, N * F);  // (N, F)
  float* dup = scratch(kDup, N * F);      // (N, F)
  back(dh, dx, dx, a.h.data(), w.down, Proj::down, false);
  ops::swiglu_backward(dgate, dup, dh, a.gate.data(), a.up.data(), N * F);
  float* dn = scratch(kDn, N * C);  // (N, C) gradient of a norm's output
  back(dn, dgate, dgate, a.n2.data(), w.gate, Proj::gate, false);
  back(dn, dup, dup, a.n2.data(), w.up, Proj::up, true);
  float* dnorm_in = scratch(kDnormIn, N * C);  // (N, C)
  ops::rmsnorm_backward(dnorm_in, nullptr, dn, a.x_mid.data(), w.post_attn_norm.data(),
                        a.rstd2.data(), N, C);
  ops::add_inplace(dx, dnorm_in, N * C);  // dx = dL/dx_mid

  // --- attention block
  const int64_t QD = NH * HD, KVD = NKV * HD;
  float* datt = scratch(kDatt, N * QD);  // (N, NH, HD)
  back(datt, dx, dx, a.att.data(), w.o, Proj::o, false);
  float* dq = scratch(kDq, N * QD);   // (N, NH, HD)
  float* dk = scratch(kDk, N * KVD);  // (N, NKV, HD)
  float* dv = scratch(kDv, N * KVD);  // (N, NKV, HD)
  ops::attention_backward(dq, dk, dv, datt, a.q.data(), call.k_cache, call.v_cache, call.key_valid,
                          call.seg_start, s);
  ops::rope_backward(dq, call.cos, call.sin, N, NH, HD);
  ops::rope_backward(dk, call.cos, call.sin, N, NKV, HD);
  // The base projections of q and k produced GGUF-ordered rows when permuted.
  std::vector<float> dq_base, dk_base;
  const float* dq_w = dq;
  const float* dk_w = dk;
  if (call.qk_rows_permuted) {
    dq_base.assign(dq, dq + N * QD);
    dk_base.assign(dk, dk + N * KVD);
    redo_gguf_qk_permutation(dq_base.data(), N, NH, HD);
    redo_gguf_qk_permutation(dk_base.data(), N, NKV, HD);
    dq_w = dq_base.data();
    dk_w = dk_base.data();
  }
  back(dn, dq_w, dq, a.n1.data(), w.q, Proj::q, false);
  back(dn, dk_w, dk, a.n1.data(), w.k, Proj::k, true);
  back(dn, dv, dv, a.n1.data(), w.v, Proj::v, true);
  ops::rmsnorm_backward(dnorm_in, nullptr, dn, a.x_in.data(), w.input_norm.data(), a.rstd1.data(), N, C);
  ops::add_inplace(dx, dnorm_in, N * C);  // dx = dL/dx_in
}

}  // namespace medtune::model
