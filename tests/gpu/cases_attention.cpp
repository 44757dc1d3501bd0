// Causal GQA attention, forward and backward, against ops::ref (double accumulation, one
// rounding at the end), on plain, GQA, left-padded, KV-history (forward) and packed rows.
//
// Tolerances: componentwise, first order in u = 2^-24, from the kernel's reduction order
// (src/gpu/attention.cu), evaluated per element from the exact (double) quantities of the row,
// times 2 for second-order terms and FMA-or-not. For one query row with visible keys J (n of
// them), scores s_j = scale·q·k_j, A_j = scale·Σ_d|q_d·k_jd|, m = max s, P = softmax(s),
// nt = (p + 1)/16 + 2 key tiles at most:
//  - a score is a dot of HD products rounded serially per lane then a tree, times scale:
//    |Δs_j| ≤ (HD + 1)·u·A_j + u·|s_j|; exp(s_j − m) adds the subtraction (u·|s_j − m|) and expf
//    (2 ulp); the subtraction is from the running max of its tile, m_tile >= min s, so it errs
//    by at most u·(m − min s). m's own error is common to every weight and cancels in the
//    normalization, and so does each tile's rescale factor for out (o and l are multiplied by the
//    same float). So each unnormalized weight has relative error ε_j ≤ u·((HD + 2)·A_j + (m − min s) + 3).
//  - out_d = Σ_j p_j v_jd / Σ_j p_j: a relative error ε_j of p_j moves out_d by P_j·ε_j·(v_jd − out_d);
//    the serial sums (n terms, nt rescale products each) and the division add
//    u·(n + 2nt + 4)·Σ_j P_j|v_jd| + u·|out_d|.
//  - lse = m + logf(l): |Δlse| ≤ 2·max ε + u·(n + 2nt + 4) + 2u·|lse − m| + u·|lse| + R, where
//    R = u·(2nt + (m − min s)) is what the rescale factors' own errors leave in l (they do not
//    cancel in lse: each expf(m_old − m_new) errs by 2u + u·(m_new − m_old), which telescopes).
//  - backward: P_j = expf(s_j − lse) has relative error η_j ≤ ε_j + |Δlse| + u·|s_j − lse| + 2u;
//    dP_j = dO·v_j errs by π_j ≤ (HD + 2)·u·Σ_d|dO_d v_jd|; D = dO·O (O the GPU forward's
//    output) by ΔD ≤ Σ_d|dO_d|·|Δout_d| + (HD + 2)·u·Σ_d|dO_d out_d|;
//    dS_j = P_j·(dP_j − D)·scale by ΔdS_j ≤ scale·P_j·(η_j·|dP_j − D| + π_j + ΔD + 3u·|dP_j − D|);
//    dQ_d = Σ_j dS_j k_jd (n serial terms): Σ_j ΔdS_j|k_jd| + u·(n + 2)·Σ_j|dS_j k_jd|;
//    dK_jd, dV_jd sum serially over the group's heads and the queries (NACC = T·group terms):
//    Σ ΔdS_j|q_d| + u·(NACC + 2)·Σ|dS_j q_d| and Σ P_j·η_j|dO_d| + u·(NACC + 2)·Σ P_j|dO_d|.
//  The GEMM attention (src/gpu/attention_gemm.cu) differs in the forward only: scores, m and
//  the weights as above without tiles (its ε_j bound is the same); l = Σ_j e_j in some order
//  (relative error ≤ (n − 1)u), P_j = e_j·(1/l) rounded twice, out_d = Σ_j P_j v_jd by the BLAS
//  in some order (n − 1 roundings of the sum, one per product). The e_j errors still cancel in
//  the normalization; l's and 1/l's are common to the row and scale out_d. So
//    |Δout_d| ≤ Σ_j P_j·ε_j·|v_jd − out_d| + u·(n + 2)·Σ_j P_j|v_jd| + u·(n + 1)·|out_d|,
//    |Δlse| ≤ 2·max ε + u·(n + 1) + 2u·|lse − m| + u·|lse|   (no rescale factors).
//  Its backward forms the same quantities as the tiled one (P from lse, dP and D dots, dS), with
//  every sum in an order of the BLAS or a butterfly: the bounds above hold for any order.
//  The split-key kernel (src/gpu/attention_split.cu; forward only, decode steps) forms each
//  block's weights against the block's own max m_s (the same ε_j bound: m_s >= s_j >= min s),
//  then merges the S blocks of a row with f_s = expf(m_s − M), which errs by 2u + u·(m − min s)
//  and is multiplied into the block's sums (u more): so each weight's relative error is
//  ε'_j = ε_j + u·((m − min s) + 3). Sums: l_s by a tree of 8 levels (8u relative),
//  L over the blocks serially (S terms); acc_s by R = 256/HD parts of at most min(n, 256) keys
//  each, the parts in order, then the blocks in order; out = O·(1/L) rounded twice. So
//    |Δout_d| ≤ Σ_j P_j·ε'_j·|v_jd − out_d| + u·(min(n, 256) + R + 2S + 10)·Σ_j P_j|v_jd| + 2u·|out_d|,
//    |Δlse| ≤ 2·max ε' + u·(S + 8) + 2u·|lse − m| + u·|lse|.
//  Each bound also gets u·|ref| for the reference's own rounding to fp32. Where the bound is 0
//  (padded keys, rows without a visible key, cache rows past T) the GPU must give exactly 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "gpu/attention_plan.h"
#include "gpu/blas.h"
#include "gpu/ops.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

// The GPU implementations of the op (src/gpu/attention.cu, src/gpu/attention_gemm.cu, and for
// the forward of decode steps src/gpu/attention_split.cu).
enum class Kernel { kTiled, kGemm, kSplit };

struct AttnCase {
  ops::AttentionShape s;
  bool padded = false;  // left padding in every row but the first
  bool packed = false;  // seg_start with three examples per row
};

std::vector<uint8_t> make_key_valid(const AttnCase& a) {
  const auto& s = a.s;
  std::vector<uint8_t> kv(static_cast<size_t>(s.B * s.Smax), 1);
  for (int64_t b = 1; b < s.B; ++b)  // row b: its first 3b + 1 positions are padding
    for (int64_t j = 0; j < std::min<int64_t>(3 * b + 1, s.Smax); ++j) kv[static_cast<size_t>(b * s.Smax + j)] = 0;
  return kv;
}

std::vector<int64_t> make_seg_start(const AttnCase& a) {
  const auto& s = a.s;
  std::vector<int64_t> seg(static_cast<size_t>(s.B * s.T));
  // Examples start at 0, T/3 (+ b), and T/3 + 1 (+ b): a long, a one-token and a long example.
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t c1 = std::min(s.T - 1, s.T / 3 + b), c2 = std::min(s.T - 1, c1 + 1);
    for (int64_t t = 0; t < s.T; ++t)
      seg[static_cast<size_t>(b * s.T + t)] = t >= c2 && c2 > c1 ? c2 : (t >= c1 && c1 > 0 ? c1 : 0);
  }
  return seg;
}

struct Bounds {
  std::vector<double> out, lse, dq, dk, dv;  // shapes of out, lse, dq, dk, dv
  std::vector<float> lse_ref;                // (B, T, NH), −inf for rows with no visible key
};

// Recomputes the row quantities in double and forms the bounds derived at the top of the file.
Bounds attention_bounds(const ops::AttentionShape& s, const std::vector<float>& q,
                        const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& dout, const std::vector<uint8_t>& key_valid,
                        const int64_t* seg_start, Kernel kernel) {
  const bool gemm = kernel == Kernel::kGemm, split = kernel == Kernel::kSplit;
  const int64_t HD = s.HD, group = s.NH / s.NKV, S = s.past + s.T;
  // The split-key kernel's blocks per row and parts per block.
  const double blocks = static_cast<double>(gpu::split_key_blocks(S));
  const double parts = static_cast<double>(256 / HD);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  const double nacc = static_cast<double>(s.T * group);
  Bounds bd;
  bd.out.assign(q.size(), 0.0);
  bd.dq.assign(q.size(), 0.0);
  bd.dk.assign(k.size(), 0.0);
  bd.dv.assign(k.size(), 0.0);
  bd.lse.assign(static_cast<size_t>(s.B * s.T * s.NH), 0.0);
  bd.lse_ref.assign(bd.lse.size(), -std::numeric_limits<float>::infinity());
  std::vector<double> sc(static_cast<size_t>(S)), A(static_cast<size_t>(S)), P(static_cast<size_t>(S)),
      eps(static_cast<size_t>(S)), o(static_cast<size_t>(HD));
  std::vector<char> vis(static_cast<size_t>(S));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t g = h / group, p = s.past + t;
        const int64_t lo = seg_start != nullptr ? seg_start[b * s.T + t] : 0;
        const size_t qi = static_cast<size_t>(((b * s.T + t) * s.NH + h) * HD);
        const auto ki = [&](int64_t j) { return static_cast<size_t>(((b * s.Smax + j) * s.NKV + g) * HD); };
        double m = -HUGE_VAL, smin = HUGE_VAL;
        int64_t n = 0;
        for (int64_t j = 0; j <= p; ++j) {
          vis[static_cast<size_t>(j)] = j >= lo && key_valid[static_cast<size_t>(b * s.Smax + j)] != 0;
          if (!vis[static_cast<size_t>(j)]) continue;
          double dot = 0, adot = 0;
          for (int64_t d = 0; d < HD; ++d) {
            const double x = static_cast<double>(q[qi + static_cast<size_t>(d)]) * static_cast<double>(k[ki(j) + static_cast<size_t>(d)]);
            dot += x;
            adot += std::fabs(x);
          }
          sc[static_cast<size_t>(j)] = dot * scale;
          A[static_cast<size_t>(j)] = adot * scale;
          m = std::max(m, sc[static_cast<size_t>(j)]);
          smin = std::min(smin, sc[static_cast<size_t>(j)]);
          ++n;
        }
        if (n == 0) continue;  // out = 0, no gradient: every bound stays 0 (exact zeros required)
        const double nt = static_cast<double>(p + 1) / 16.0 + 2.0;
        double l = 0, max_eps = 0;
        for (int64_t j = 0; j <= p; ++j) {
          if (!vis[static_cast<size_t>(j)]) continue;
          const size_t J = static_cast<size_t>(j);
          P[J] = std::exp(sc[J] - m);
          l += P[J];
          eps[J] = kU * (static_cast<double>(HD + 2) * A[J] + (m - smin) + 3) +
                   (split ? kU * ((m - smin) + 3) : 0.0);
          max_eps = std::max(max_eps, eps[J]);
        }
        const double lse = m + std::log(l);
        const double nd = static_cast<double>(n);
        // Forward roundings of the sums: the tiled kernel's Σ p·v and l with its rescales; the
        // GEMM attention's l, 1/l and product (common to the row: coef_out·|out|) and the BLAS's
        // Σ P·v (acc_u·Σ P|v|).
        const double acc_u = gemm    ? kU * (nd + 2)
                             : split ? kU * (std::min(nd, 256.0) + parts + 2 * blocks + 10)
                                     : kU * (nd + 2 * nt + 4);
        const double coef_out = gemm ? kU * (nd + 1) : split ? 2 * kU : kU;
        const double dlse = gemm ? 2 * max_eps + kU * (nd + 1) + 2 * kU * std::fabs(lse - m) + kU * std::fabs(lse)
                            : split ? 2 * max_eps + kU * (blocks + 8) + 2 * kU * std::fabs(lse - m) +
                                          kU * std::fabs(lse)
                                    : 2 * max_eps + acc_u + 2 * kU * std::fabs(lse - m) + kU * std::fabs(lse) +
                                          kU * (2 * nt + (m - smin));
        const size_t li = static_cast<size_t>((b * s.T + t) * s.NH + h);
        bd.lse_ref[li] = static_cast<float>(lse);
        bd.lse[li] = 2 * dlse;
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j <= p; ++j) {
          if (!vis[static_cast<size_t>(j)]) continue;
          P[static_cast<size_t>(j)] /= l;
          for (int64_t d = 0; d < HD; ++d)
            o[static_cast<size_t>(d)] += P[static_cast<size_t>(j)] * static_cast<double>(v[ki(j) + static_cast<size_t>(d)]);
        }
        // Forward bound, first order (Δout), kept for D's error in the backward.
        std::vector<double> dout_err(static_cast<size_t>(HD), 0.0);
        for (int64_t d = 0; d < HD; ++d) {
          double a = 0, pv = 0;
          for (int64_t j = 0; j <= p; ++j) {
            if (!vis[static_cast<size_t>(j)]) continue;
            const double vj = v[ki(j) + static_cast<size_t>(d)];
            a += P[static_cast<size_t>(j)] * eps[static_cast<size_t>(j)] * std::fabs(vj - o[static_cast<size_t>(d)]);
            pv += P[static_cast<size_t>(j)] * std::fabs(vj);
          }
          dout_err[static_cast<size_t>(d)] = a + acc_u * pv + coef_out * std::fabs(o[static_cast<size_t>(d)]);
          bd.out[qi + static_cast<size_t>(d)] = 2 * dout_err[static_cast<size_t>(d)] + kU * std::fabs(o[static_cast<size_t>(d)]);
        }
        if (s.past != 0 || dout.empty()) continue;  // the backward exists for past = 0 only
        // Backward.
        const float* dO = dout.data() + qi;
        double D = 0, dD = 0;
        for (int64_t d = 0; d < HD; ++d) {
          D += static_cast<double>(dO[d]) * o[static_cast<size_t>(d)];
          dD += std::fabs(static_cast<double>(dO[d])) * dout_err[static_cast<size_t>(d)] +
                kU * static_cast<double>(HD + 2) * std::fabs(static_cast<double>(dO[d]) * o[static_cast<size_t>(d)]);
        }
        for (int64_t j = 0; j <= p; ++j) {
          if (!vis[static_cast<size_t>(j)]) continue;
          const size_t J = static_cast<size_t>(j);
          double dp = 0, adp = 0;
          for (int64_t d = 0; d < HD; ++d) {
            const double x = static_cast<double>(dO[d]) * static_cast<double>(v[ki(j) + static_cast<size_t>(d)]);
            dp += x;
            adp += std::fabs(x);
          }
          const double eta = eps[J] + dlse + kU * std::fabs(sc[J] - lse) + 2 * kU;
          const double pi = kU * static_cast<double>(HD + 2) * adp;
          const double ds = P[J] * (dp - D) * scale;
          const double dds = scale * P[J] * (eta * std::fabs(dp - D) + pi + dD + 3 * kU * std::fabs(dp - D));
          for (int64_t d = 0; d < HD; ++d) {
            const size_t kd = ki(j) + static_cast<size_t>(d), qd = qi + static_cast<size_t>(d);
            const double kv = std::fabs(static_cast<double>(k[kd])), qv = std::fabs(static_cast<double>(q[qd]));
            const double dov = std::fabs(static_cast<double>(dO[d]));
            bd.dq[qd] += 2 * (dds * kv + kU * static_cast<double>(n + 2) * std::fabs(ds) * kv);
            bd.dk[kd] += 2 * (dds * qv + kU * (nacc + 2) * std::fabs(ds) * qv);
            bd.dv[kd] += 2 * (P[J] * eta * dov + kU * (nacc + 2) * P[J] * dov);
          }
        }
      }
  return bd;
}

void add_ref_rounding(std::vector<double>& bound, const std::vector<float>& ref) {
  for (size_t i = 0; i < ref.size(); ++i) bound[i] += kU * std::fabs(static_cast<double>(ref[i]));
}

// −inf logsumexps (rows with no visible key) must match exactly; they are then zeroed on both
// sides so that `within` compares the finite ones.
void check_lse(Checks& c, std::vector<float> lse, std::vector<float> ref, const std::vector<double>& bound) {
  size_t bad = 0, rows = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::isinf(ref[i])) {
      ++rows;
      bad += lse[i] == ref[i] ? 0 : 1;
      lse[i] = ref[i] = 0.0f;
    }
  c.record(bad == 0, "lse: " + std::to_string(rows) + " rows without a visible key are -inf (" +
                         std::to_string(bad) + " are not)");
  c.within("lse", lse, ref, bound);
}

// kv_chunk: for the GEMM attention, the kv heads its workspace holds (0: the plan's chunk).
void add_case(Registry& r, const std::string& label, const AttnCase& a, bool quick,
              Kernel kernel = Kernel::kTiled, int64_t kv_chunk = 0) {
  const ops::AttentionShape s = a.s;
  const bool gemm = kernel == Kernel::kGemm, split = kernel == Kernel::kSplit;
  const std::string dims = std::string(gemm ? "gemm_" : split ? "split_" : "") + label + "/" +
      shape({{"B", s.B}, {"T", s.T}, {"past", s.past}, {"Smax", s.Smax}, {"NH", s.NH},
             {"NKV", s.NKV}, {"HD", s.HD}}) + (a.padded ? ",padded" : "") + (a.packed ? ",packed" : "");
  r.add("attention/" + dims, quick, [=](Checks& c, const gpu::Stream& st) {
    const size_t nq = static_cast<size_t>(s.B * s.T * s.NH * s.HD);
    const size_t nk = static_cast<size_t>(s.B * s.Smax * s.NKV * s.HD);
    const std::vector<float> q = random_normals(nq, 31, 1.5f), k = random_normals(nk, 32),
                             v = random_normals(nk, 33), dout = random_normals(nq, 34);
    const std::vector<uint8_t> key_valid = a.padded ? make_key_valid(a)
                                                    : std::vector<uint8_t>(static_cast<size_t>(s.B * s.Smax), 1);
    const std::vector<int64_t> seg = a.packed ? make_seg_start(a) : std::vector<int64_t>{};
    const int64_t* seg_host = a.packed ? seg.data() : nullptr;
    const bool backward = s.past == 0 && !split;  // the split-key kernel is a forward only

    std::vector<float> out_ref(nq);
    ops::ref::attention_forward(out_ref.data(), q.data(), k.data(), v.data(),
                                a.padded ? key_valid.data() : nullptr, seg_host, s);
    std::vector<float> dq_ref(nq), dk_ref(nk), dv_ref(nk);
    if (backward)
      ops::ref::attention_backward<float>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(),
                                          q.data(), k.data(), v.data(),
                                          a.padded ? key_valid.data() : nullptr, seg_host, s);
    Bounds bd = attention_bounds(s, q, k, v, backward ? dout : std::vector<float>{}, key_valid, seg_host,
                                 kernel);
    // The GEMM attention's workspace: the backward's plan (the larger), or kv_chunk kv heads of
    // it; filled with 0xFF bytes (NaNs), so that a read before a write shows in the results.
    const gpu::AttentionGemmPlan plan =
        gpu::plan_attention_gemm(s.B, s.T, s.past + s.T, s.NH, s.NKV, backward);
    c.record(!gemm || plan.use, "the GEMM attention's plan applies to this shape");
    if (gemm && !plan.use) return;
    const int64_t split_bytes = gpu::split_attention_workspace_bytes(s.B, s.T, s.past + s.T, s.NH, s.HD);
    c.record(!split || split_bytes > 0, "the split-key kernel takes this shape");
    const int64_t work_bytes = split ? split_bytes
                               : !gemm ? 0
                               : kv_chunk > 0 ? plan.rowstat_bytes + kv_chunk * plan.per_kv_bytes
                                              : plan.workspace_bytes();
    if (gemm && kv_chunk > 0)
      c.record(gpu::kv_heads_fitting(plan, work_bytes, s.NKV) == kv_chunk,
               "the workspace holds " + std::to_string(kv_chunk) + " kv heads per chunk");
    GuardedDevice<uint8_t> d_work(static_cast<size_t>(std::max<int64_t>(work_bytes, 1)), st);
    std::optional<gpu::Blas> blas;
    if (gemm) blas.emplace(st);

    GuardedDevice<float> d_q(q, st), d_k(k, st), d_v(v, st), d_dout(dout, st), d_out(nq, st),
        d_lse(bd.lse_ref.size(), st), d_dq(nq, st), d_dk(nk, st), d_dv(nk, st);
    GuardedDevice<uint8_t> d_valid(key_valid, st);
    GuardedDevice<int64_t> d_seg(a.packed ? seg : std::vector<int64_t>(1, 0), st);
    const uint8_t* valid_ptr = a.padded ? d_valid.data() : nullptr;
    const int64_t* seg_ptr = a.packed ? d_seg.data() : nullptr;
    const auto forward = [&](float* o, float* l) {
      if (split)
        gpu::attention_forward_split(d_work.data(), work_bytes, o, l, d_q.data(), d_k.data(),
                                     d_v.data(), valid_ptr, s, st);
      else if (gemm)
        gpu::attention_forward_gemm(*blas, d_work.data(), work_bytes, o, l, d_q.data(), d_k.data(), d_v.data(),
                                    valid_ptr, seg_ptr, s);
      else
        gpu::attention_forward(o, l, d_q.data(), d_k.data(), d_v.data(), valid_ptr, seg_ptr, s, st);
    };
    forward(d_out.data(), d_lse.data());
    const std::vector<float> out = d_out.download(st), lse = d_lse.download(st);
    add_ref_rounding(bd.out, out_ref);
    c.guards("out", d_out, st);
    c.guards("lse", d_lse, st);
    c.nan_agreement("out", out, out_ref);
    c.within("out", out, out_ref, bd.out);
    check_lse(c, lse, bd.lse_ref, bd.lse);
    // The output without lse is the same computation.
    GuardedDevice<float> d_out2(nq, st);
    forward(d_out2.data(), nullptr);
    c.bit_exact("out without lse == out", d_out2.download(st), out);
    if (gemm || split) c.guards("workspace (forward)", d_work, st);
    if (split) {
      // Deterministic, and refuses what it does not take: a workspace one float short, more
      // queries per row than kSplitMaxQueries.
      GuardedDevice<float> d_out3(nq, st);
      forward(d_out3.data(), nullptr);
      c.bit_exact("out run twice", d_out3.download(st), out);
      bool short_refused = false, long_refused = false;
      try {
        gpu::attention_forward_split(d_work.data(), work_bytes - 4, d_out3.data(), nullptr, d_q.data(),
                                     d_k.data(), d_v.data(), valid_ptr, s, st);
      } catch (const Internal&) {
        short_refused = true;
      }
      ops::AttentionShape longer = s;
      longer.T = gpu::kSplitMaxQueries + 1;
      longer.Smax = std::max(s.Smax, longer.past + longer.T);
      try {
        gpu::attention_forward_split(d_work.data(), work_bytes, d_out3.data(), nullptr, d_q.data(),
                                     d_k.data(), d_v.data(), valid_ptr, longer, st);
      } catch (const Internal&) {
        long_refused = true;
      }
      c.record(short_refused, "a workspace below split_attention_workspace_bytes is refused");
      c.record(long_refused, "T > kSplitMaxQueries is refused");
    }
    if (!backward) return;

    const auto backward_pass = [&] {
      if (gemm)
        gpu::attention_backward_gemm(*blas, d_work.data(), work_bytes, d_dq.data(), d_dk.data(),
                                     d_dv.data(), d_dout.data(), d_out.data(), d_lse.data(), d_q.data(),
                                     d_k.data(), d_v.data(), valid_ptr, seg_ptr, s);
      else
        gpu::attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(),
                                d_lse.data(), d_q.data(), d_k.data(), d_v.data(), valid_ptr, seg_ptr, s,
                                st);
    };
    backward_pass();
    const std::vector<float> dq = d_dq.download(st), dk = d_dk.download(st), dv = d_dv.download(st);
    add_ref_rounding(bd.dq, dq_ref);
    add_ref_rounding(bd.dk, dk_ref);
    add_ref_rounding(bd.dv, dv_ref);
    c.guards("dq", d_dq, st);
    c.guards("dk", d_dk, st);
    c.guards("dv", d_dv, st);
    c.nan_agreement("dq", dq, dq_ref);
    c.nan_agreement("dk", dk, dk_ref);
    c.nan_agreement("dv", dv, dv_ref);
    c.within("dq", dq, dq_ref, bd.dq);
    c.within("dk", dk, dk_ref, bd.dk);
    c.within("dv", dv, dv_ref, bd.dv);
    if (gemm) c.guards("workspace (backward)", d_work, st);
    // Deterministic: a second run is bit-identical.
    backward_pass();
    c.bit_exact("dk run twice", d_dk.download(st), dk);
  });
}

}  // namespace

void register_attention_cases(Registry& r) {
  //                     B  T  past Smax NH NKV HD
  add_case(r, "tiny", {{1, 1, 0, 1, 1, 1, 1}}, true);
  add_case(r, "odd", {{2, 37, 0, 41, 6, 2, 40}, true, false}, true);        // GQA, padding, cache rows
  add_case(r, "odd", {{1, 19, 0, 19, 3, 3, 33}}, true);                      // MHA, HD not /16
  add_case(r, "history", {{2, 5, 11, 20, 4, 2, 24}, true, false}, true);    // forward with past
  add_case(r, "packed", {{2, 50, 0, 53, 4, 1, 64}, false, true}, true);     // seg_start, MQA
  add_case(r, "packed", {{1, 40, 0, 40, 8, 4, 128}, true, true}, true);
  add_case(r, "hd256", {{1, 21, 0, 21, 2, 1, 256}}, true);
  // Llama-3-8B attention (NH 32, NKV 8, HD 128) at T = 512; Llama-2-7B's MHA (NKV 32) at 256.
  add_case(r, "llama3_8b", {{1, 512, 0, 512, 32, 8, 128}}, false);
  add_case(r, "llama2_7b", {{1, 256, 0, 256, 32, 32, 128}, true, false}, false);
  // The GEMM attention (from 16 queries per row): the shapes above that it takes, a forward with
  // history at T >= 16, and workspaces of one and two kv heads (chunks over the kv heads, the
  // last one partial).
  const Kernel G = Kernel::kGemm;
  add_case(r, "odd", {{2, 37, 0, 41, 6, 2, 40}, true, false}, true, G);
  add_case(r, "odd", {{1, 19, 0, 19, 3, 3, 33}}, true, G);
  add_case(r, "history", {{2, 20, 11, 40, 4, 2, 24}, true, false}, true, G);
  add_case(r, "packed", {{2, 50, 0, 53, 4, 1, 64}, false, true}, true, G);
  add_case(r, "packed", {{1, 40, 0, 40, 8, 4, 128}, true, true}, true, G);
  add_case(r, "hd256", {{1, 21, 0, 21, 2, 1, 256}}, true, G);
  add_case(r, "chunk1", {{2, 37, 0, 41, 6, 2, 40}, true, false}, true, G, 1);
  add_case(r, "chunk2", {{2, 33, 0, 33, 10, 5, 16}, true, true}, true, G, 2);
  add_case(r, "llama3_8b", {{1, 512, 0, 512, 32, 8, 128}}, false, G);
  add_case(r, "llama2_7b", {{1, 256, 0, 256, 32, 32, 128}, true, false}, false, G);
  // The split-key kernel (decode steps, T <= 4): one and several blocks of 256 keys per row;
  // queries whose causal end falls inside the last block (T = 3 across the 512 boundary); a row
  // whose only key is padding (no visible key: zeros, lse −inf); HD 16 (16 parts), 80 (3 parts,
  // 16 threads idle), 128 and 256; GQA, MQA, MHA; Llama-2-7B and Llama-3-8B decode shapes.
  const Kernel S = Kernel::kSplit;
  add_case(r, "tiny", {{2, 1, 0, 1, 2, 1, 16}, true, false}, true, S);
  add_case(r, "decode", {{2, 1, 300, 320, 4, 2, 64}, true, false}, true, S);
  add_case(r, "boundary", {{1, 3, 510, 520, 8, 8, 128}}, true, S);
  add_case(r, "hd80", {{2, 2, 40, 50, 4, 4, 80}, true, false}, true, S);
  add_case(r, "hd256", {{1, 1, 700, 701, 2, 1, 256}}, true, S);
  add_case(r, "long", {{1, 4, 2000, 2004, 4, 1, 64}, true, false}, true, S);
  add_case(r, "llama2_7b", {{1, 1, 300, 512, 32, 32, 128}}, false, S);
  add_case(r, "llama3_8b", {{4, 1, 1000, 1100, 32, 8, 128}, true, false}, false, S);
}

}  // namespace medtune::gpu_test
