// Causal GQA attention through the vendor's BLAS: the same op as gpu/attention.cu (ops.h), with
// the O(T² HD) products in strided-batched SGEMMs (cuBLAS / hipBLAS, plain fp32, no TF32) and
// only the softmax and the score-gradient in kernels of this file.
//
// Why: the tiled kernel computes every score on CUDA cores from shared memory, one 16-lane group
// per query; on an H200 it ran at ~2.3 TFLOP/s and took 81% of a Llama-2-7B LoRA step
// (BENCHMARKS.md, session 31 profile). The BLAS runs the same fp32 products near the chip's
// fp32 peak. The price is the scores in device memory, (T, n) fp32 per query head, a chunk of
// kv heads at a time (gpu/attention_plan.h bounds it by 256 MiB; calls it cannot bound take the
// tiled kernel) in a workspace the caller owns.
//
// Status: compiled for sm_80/sm_90 and gfx90a; NEVER RUN on a GPU yet (written in session 32,
// without a device). tests/gpu/cases_attention.cpp runs it against the CPU reference with bounds
// derived for this order of operations; scripts/gpu-check.sh runs those cases first.
//
// Per batch row b and chunk of kv heads [g0, g1), scores S are (g1 - g0, group, T, n) fp32:
//   forward   S = scale·Q·Kᵀ (GEMM); P = softmax over the visible keys, in place, and the
//             row's logsumexp (kernel); O = P·V (GEMM).
//   backward  S = scale·Q·Kᵀ and dP = dO·Vᵀ (GEMMs); P = exp(S − lse), dS = P·(dP − D)·scale with
//             D = rowsum(dO ∘ O) (kernels); dQ = dS·K, dK = Σ_heads dSᵀ·Q, dV = Σ_heads Pᵀ·dO
//             (GEMMs; a kv head's query heads accumulate one after the other, β = 1 after the
//             first, so the result is deterministic and no two products of one call write the
//             same rows).
// Masks (causal, padding, packed examples) are applied by value in the kernels: hidden pairs get
// P = 0 and dS = 0 exactly, so padded keys and rows without a visible key get exactly zero output
// and gradient, as the CPU op gives.
#include <string>

#include "core/error.h"
#include "gpu/attention_plan.h"
#include "gpu/blas.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

// Lanes per score row: width-32 shuffles, so a row never straddles a warp (32 or 64 lanes).
constexpr int kRowLanes = 32;
constexpr int kRowsPerBlock = kThreads / kRowLanes;

struct Geo {
  int64_t B, T, past, Smax, NH, NKV, HD, group, n;  // n = past + T keys per row
  float scale;
};

__device__ inline bool pair_visible(const uint8_t* key_valid, int64_t b, int64_t Smax, int64_t j,
                                    int64_t lo, int64_t p) {
  return j >= lo && j <= p && (key_valid == nullptr || key_valid[b * Smax + j] != 0);
}

// Row i of a chunk's scores (i < rows = (g1 - g0)·group·T) is query t = i % T of query head
// h = g0·group + i / T of batch row b; its n scores at S + i·n.
struct RowOf {
  int64_t t, h;
};
__device__ inline RowOf row_of(int64_t i, const Geo& s, int64_t g0) {
  return {i % s.T, g0 * s.group + i / s.T};
}

// Forward: each row of scores -> its softmax probabilities over the visible keys (0 elsewhere),
// in place, and lse[(b, t, h)] = m + log Σ exp(s − m) (−inf without a visible key) when lse is
// not null. One group of kRowLanes lanes per row; a group past the last row computes on row 0
// and writes nothing (every lane reaches every shuffle).
__global__ void softmax_rows_kernel(float* S, float* lse, const uint8_t* key_valid,
                                    const int64_t* seg_start, Geo s, int64_t b, int64_t g0,
                                    int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowLanes;
  const int lane = static_cast<int>(threadIdx.x) % kRowLanes;
  const bool ok = i < rows;
  const RowOf r = row_of(ok ? i : 0, s, g0);
  const int64_t p = s.past + r.t;
  const int64_t lo = seg_start != nullptr ? seg_start[b * s.T + r.t] : 0;
  float* row = S + (ok ? i : 0) * s.n;
  float m = -INFINITY;
  for (int64_t j = lane; j < s.n; j += kRowLanes)
    if (pair_visible(key_valid, b, s.Smax, j, lo, p)) m = fmaxf(m, row[j]);
  m = warp_max(m, kRowLanes);
  float l = 0.0f;
  for (int64_t j = lane; j < s.n; j += kRowLanes) {
    const bool vis = m != -INFINITY && pair_visible(key_valid, b, s.Smax, j, lo, p);
    const float e = vis ? expf(row[j] - m) : 0.0f;
    l += e;
    if (ok) row[j] = e;
  }
  l = warp_sum(l, kRowLanes);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  if (!ok) return;  // after the last shuffle
  for (int64_t j = lane; j < s.n; j += kRowLanes) row[j] *= inv;
  if (lse != nullptr && lane == 0)
    lse[(b * s.T + r.t) * s.NH + r.h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D[(b, t, h)] = Σ_d dO·O over HD, every row of the call. One group of kRowLanes lanes per row.
__global__ void row_dots_kernel(float* D, const float* dout, const float* out, int64_t rows,
                                int64_t HD) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowLanes;
  const int lane = static_cast<int>(threadIdx.x) % kRowLanes;
  const bool ok = i < rows;
  const int64_t base = (ok ? i : 0) * HD;
  float acc = 0.0f;
  for (int64_t d = lane; d < HD; d += kRowLanes) acc += dout[base + d] * out[base + d];
  acc = warp_sum(acc, kRowLanes);
  if (ok && lane == 0) D[i] = acc;
}

// Backward, elementwise over a chunk's rows·n pairs: S (scaled scores) -> P = exp(s − lse) for a
// visible pair of a row with a visible key, else 0; dP -> dS = P·(dP − D)·scale.
__global__ void probs_and_dscores_kernel(float* S, float* dP, const float* lse, const float* D,
                                         const uint8_t* key_valid, const int64_t* seg_start, Geo s,
                                         int64_t b, int64_t g0, int64_t rows) {
  const int64_t total = rows * s.n;
  for (int64_t e = thread_index(); e < total; e += grid_threads()) {
    const int64_t i = e / s.n, j = e % s.n;
    const RowOf r = row_of(i, s, g0);
    const int64_t lo = seg_start != nullptr ? seg_start[b * s.T + r.t] : 0;
    const int64_t stat = (b * s.T + r.t) * s.NH + r.h;
    const float lse_t = lse[stat];
    const bool vis = lse_t != -INFINITY && pair_visible(key_valid, b, s.Smax, j, lo, s.past + r.t);
    const float pr = vis ? expf(S[e] - lse_t) : 0.0f;
    S[e] = pr;
    dP[e] = pr * (dP[e] - D[stat]) * s.scale;
  }
}

Geo checked_geo(const ops::AttentionShape& s, const char* op) {
  check_attention_shape(s, op);
  return {s.B,   s.T,  s.past,       s.Smax,       s.NH,
          s.NKV, s.HD, s.NH / s.NKV, s.past + s.T, 1.0f / sqrtf(static_cast<float>(s.HD))};
}

// The kv heads per chunk that `work` holds for this call (Internal when the shape is not one
// for the GEMM attention or the workspace holds less than one kv head).
int64_t checked_chunk(const Geo& s, int64_t work_bytes, bool backward, AttentionGemmPlan* plan,
                      const char* op) {
  *plan = plan_attention_gemm(s.B, s.T, s.n, s.NH, s.NKV, backward);
  if (!plan->use)
    throw Internal(std::string(op) +
                   ": the shape is not one for the GEMM attention "
                   "(gpu/attention_plan.h); the caller must take the tiled kernel");
  const int64_t kvc = kv_heads_fitting(*plan, work_bytes, s.NKV);
  if (kvc < 1)
    throw Internal(std::string(op) + ": workspace of " + std::to_string(work_bytes) +
                   " bytes, less than one kv head's " +
                   std::to_string(plan->rowstat_bytes + plan->per_kv_bytes));
  return kvc;
}

unsigned row_blocks(int64_t rows, const char* op) {
  return rows_grid((rows + kRowsPerBlock - 1) / kRowsPerBlock, op);
}

// The GEMMs below address, for batch row b, kv heads g0 + gi (gi < cg) and the query head
// h = (g0 + gi)·group + r of each:
//   Q_h, O_h, dQ_h, dO_h  (T, HD)  at x + (b·T·NH + g0·group + r)·HD  ld NH·HD   stride group·HD
//   K_g, V_g, dK_g, dV_g  (n, HD)  at x + (b·Smax·NKV + g0)·HD        ld NKV·HD  stride HD
//   S_h, dP_h             (T, n)   at S + r·T·n                        ld n       stride group·T·n
struct Addr {
  const Geo& s;
  int64_t b, g0, r;
  int64_t q() const { return (b * s.T * s.NH + g0 * s.group + r) * s.HD; }
  int64_t kv() const { return (b * s.Smax * s.NKV + g0) * s.HD; }
  int64_t sc() const { return r * s.T * s.n; }
  int64_t q_ld() const { return s.NH * s.HD; }
  int64_t q_stride() const { return s.group * s.HD; }
  int64_t kv_ld() const { return s.NKV * s.HD; }
  int64_t sc_stride() const { return s.group * s.T * s.n; }
};

// S_h (T, n) = scale · Q_h (T, HD) · K_gᵀ, for the chunk's heads with this r.
void scores(const Blas& blas, float* S, const float* q, const float* k, const Addr& a, int64_t cg) {
  const Geo& s = a.s;
  gemm_strided_batched(blas, false, true, s.T, s.n, s.HD, s.scale, q + a.q(), a.q_ld(),
                       a.q_stride(), k + a.kv(), a.kv_ld(), s.HD, 0.0f, S + a.sc(), s.n,
                       a.sc_stride(), cg);
}

}  // namespace

void attention_forward_gemm(const Blas& blas, void* work, int64_t work_bytes, float* out,
                            float* lse, const float* q, const float* k, const float* v,
                            const uint8_t* key_valid, const int64_t* seg_start,
                            const ops::AttentionShape& shape) {
  const char* op = "gpu::attention_forward_gemm";
  const Geo s = checked_geo(shape, op);
  if (seg_start != nullptr && s.past != 0)
    throw Internal(std::string(op) + ": packed rows (seg_start) need past = 0, got " +
                   std::to_string(s.past));
  if (s.B == 0 || s.T == 0) return;
  AttentionGemmPlan plan;
  const int64_t kvc = checked_chunk(s, work_bytes, false, &plan, op);
  auto* S = static_cast<float*>(work);  // (kvc, group, T, n)
  const gpuStream_t st = stream_of(blas.stream());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t g0 = 0; g0 < s.NKV; g0 += kvc) {
      const int64_t cg = std::min(kvc, s.NKV - g0), rows = cg * s.group * s.T;
      for (int64_t r = 0; r < s.group; ++r) scores(blas, S, q, k, Addr{s, b, g0, r}, cg);
      softmax_rows_kernel<<<row_blocks(rows, op), kThreads, 0, st>>>(S, lse, key_valid, seg_start,
                                                                     s, b, g0, rows);
      GPU_CHECK_LAUNCH();
      for (int64_t r = 0; r < s.group; ++r) {
        // O_h (T, HD) = P_h (T, n) · V_g (n, HD)
        const Addr a{s, b, g0, r};
        gemm_strided_batched(blas, false, false, s.T, s.HD, s.n, 1.0f, S + a.sc(), s.n,
                             a.sc_stride(), v + a.kv(), a.kv_ld(), s.HD, 0.0f, out + a.q(),
                             a.q_ld(), a.q_stride(), cg);
      }
    }
}

void attention_backward_gemm(const Blas& blas, void* work, int64_t work_bytes, float* dq, float* dk,
                             float* dv, const float* dout, const float* out, const float* lse,
                             const float* q, const float* k, const float* v,
                             const uint8_t* key_valid, const int64_t* seg_start,
                             const ops::AttentionShape& shape) {
  const char* op = "gpu::attention_backward_gemm";
  const Geo s = checked_geo(shape, op);
  if (s.past != 0)
    throw Internal(std::string(op) + ": past = " + std::to_string(s.past) +
                   ", but the backward supports only training (past = 0)");
  if (s.B == 0) return;
  const gpuStream_t st = stream_of(blas.stream());
  const int64_t kv_row = s.NKV * s.HD;
  if (s.Smax > s.T)  // cache rows without queries: zero gradient
    for (int64_t b = 0; b < s.B; ++b) {
      const size_t bytes = static_cast<size_t>((s.Smax - s.T) * kv_row) * sizeof(float);
      GPU_CHECK(gpuMemsetAsync(dk + (b * s.Smax + s.T) * kv_row, 0, bytes, st));
      GPU_CHECK(gpuMemsetAsync(dv + (b * s.Smax + s.T) * kv_row, 0, bytes, st));
    }
  if (s.T == 0) return;
  AttentionGemmPlan plan;
  const int64_t kvc = checked_chunk(s, work_bytes, true, &plan, op);
  auto* D = static_cast<float*>(work);  // (B, T, NH)
  auto* S = reinterpret_cast<float*>(static_cast<char*>(work) +
                                     plan.rowstat_bytes);  // (kvc, group, T, n)
  float* dP = S + kvc * s.group * s.T * s.n;               // (kvc, group, T, n)
  const int64_t stat_rows = s.B * s.T * s.NH;
  row_dots_kernel<<<row_blocks(stat_rows, op), kThreads, 0, st>>>(D, dout, out, stat_rows, s.HD);
  GPU_CHECK_LAUNCH();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t g0 = 0; g0 < s.NKV; g0 += kvc) {
      const int64_t cg = std::min(kvc, s.NKV - g0), rows = cg * s.group * s.T;
      for (int64_t r = 0; r < s.group; ++r) {
        const Addr a{s, b, g0, r};
        scores(blas, S, q, k, a, cg);
        // dP_h (T, n) = dO_h (T, HD) · V_gᵀ
        gemm_strided_batched(blas, false, true, s.T, s.n, s.HD, 1.0f, dout + a.q(), a.q_ld(),
                             a.q_stride(), v + a.kv(), a.kv_ld(), s.HD, 0.0f, dP + a.sc(), s.n,
                             a.sc_stride(), cg);
      }
      probs_and_dscores_kernel<<<blocks_for(rows * s.n), kThreads, 0, st>>>(
          S, dP, lse, D, key_valid, seg_start, s, b, g0, rows);
      GPU_CHECK_LAUNCH();
      for (int64_t r = 0; r < s.group; ++r) {
        const Addr a{s, b, g0, r};
        const float beta = r == 0 ? 0.0f : 1.0f;
        // dQ_h (T, HD) = dS_h (T, n) · K_g (n, HD)
        gemm_strided_batched(blas, false, false, s.T, s.HD, s.n, 1.0f, dP + a.sc(), s.n,
                             a.sc_stride(), k + a.kv(), a.kv_ld(), s.HD, 0.0f, dq + a.q(), a.q_ld(),
                             a.q_stride(), cg);
        // dK_g (n, HD) (+)= dS_hᵀ (n, T) · Q_h (T, HD);  dV_g (+)= P_hᵀ · dO_h
        gemm_strided_batched(blas, true, false, s.n, s.HD, s.T, 1.0f, dP + a.sc(), s.n,
                             a.sc_stride(), q + a.q(), a.q_ld(), a.q_stride(), beta, dk + a.kv(),
                             a.kv_ld(), s.HD, cg);
        gemm_strided_batched(blas, true, false, s.n, s.HD, s.T, 1.0f, S + a.sc(), s.n,
                             a.sc_stride(), dout + a.q(), a.q_ld(), a.q_stride(), beta, dv + a.kv(),
                             a.kv_ld(), s.HD, cg);
      }
    }
}

}  // namespace medtune::gpu
