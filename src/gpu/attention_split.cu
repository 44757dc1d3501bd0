// Attention for decode steps (ops.h attention_forward_split): a few query rows against a long key
// history, split over the keys (as FlashDecoding does). NEVER RUN on a GPU yet: checked on the CPU
// under HIP-CPU (scripts/hip-cpu-check.sh) against the derived bound of
// tests/gpu/cases_attention.cpp.
//
// Why: the tiled kernel (gpu/attention.cu) gives each query row one row group of 16 lanes that
// walks all of the row's keys; a decode step (T = 1) then keeps 16 of a block's 256 threads busy
// in one block per head. On the H200 that was 0.3 ms per Llama-2-7B layer at ~300 positions, 38%
// of a decode step (docs/gpu.md).
//
// Two kernels, each sum in a fixed order (deterministic on a given device):
//  1. partial, grid (splits, NH, B·T): one block per (query row, head, kSplitKeys keys). Scores
//     of the block's keys (row group grp takes keys c = grp + 16 i; a dot as in
//     gpu/attention_lanes.h), scaled, −inf where hidden, into shared memory; their max m_s;
//     weights e_j = exp(s_j − m_s), 0 where hidden, and l_s = Σ e_j (a tree of 8 levels);
//     acc_s[d] = Σ_j e_j·v_jd by threads (part r, d): part r sums a contiguous slice of the keys
//     serially, then the parts are added in order. Writes (m_s, l_s, acc_s[0, HD)).
//  2. merge, grid (B·T, NH), thread d: M = max m_s; f_s = exp(m_s − M), 0 for a split without a
//     visible key; L = Σ f_s·l_s and O_d = Σ f_s·acc_s[d] over the splits in order; out_d =
//     O_d·(1/L), lse = M + log L; a row with no visible key (L = 0) gets zeros and lse = −inf.
#include <string>

#include "core/error.h"
#include "gpu/attention_lanes.h"
#include "gpu/attention_plan.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

using namespace attn;  // the row groups, Dims, key_visible (gpu/attention_lanes.h)

static_assert(kSplitKeys == kThreads, "one key of a block per thread in the softmax");
static_assert(kSplitKeys % kGroups == 0, "the row groups share a block's keys evenly");

// Max or sum of one value per thread over the block, by a tree in shared memory (buf: kThreads
// floats): 8 levels, each pair in a fixed place. Every thread reaches every barrier. Not
// reduce.h's block_sum: this one ends in a barrier, so the kernel can reuse `buf` (parts) at once
// after the second call, and its barriers publish the weights w written between the calls.
template <bool kMax>
__device__ inline float tree_reduce(float v, float* buf) {
  const int tid = static_cast<int>(threadIdx.x);
  buf[tid] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride)
      buf[tid] = kMax ? fmaxf(buf[tid], buf[tid + stride]) : buf[tid] + buf[tid + stride];
    __syncthreads();
  }
  const float r = buf[0];
  __syncthreads();  // buf is reused by the next call
  return r;
}

// The partial result of split `split` for query row `row` (= b·T + t), head h: HD + 2 floats.
__device__ inline int64_t partial_index(const Dims& s, int64_t split, int64_t row, int64_t h) {
  return ((split * s.B * s.T + row) * s.NH + h) * (s.HD + 2);
}

// grid: (splits, NH, B·T), kThreads.   work: (splits, B·T, NH, HD + 2)
__global__ void attention_split_partial_kernel(float* work, const float* q, const float* k,
                                               const float* v, const uint8_t* key_valid, Dims s) {
  __shared__ float w[kSplitKeys];    // the block's scores, then their weights
  __shared__ float parts[kThreads];  // the reductions' buffer, then (nparts, HD): Σ e·v per part
  const int64_t split = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
  const int64_t b = row / s.T, t = row % s.T, g = h / (s.NH / s.NKV);
  const int64_t p = s.past + t;  // the query's position: it sees keys [0, p] (causal)
  const int64_t j0 = split * kSplitKeys;
  // The block's keys that are causally visible: [j0, j0 + n). A key c >= n reads key j0 (always
  // a cache row: j0 <= past + T − 1 < Smax) and is masked by value below.
  const int64_t n = p + 1 - j0 < 0 ? 0 : (p + 1 - j0 > kSplitKeys ? kSplitKeys : p + 1 - j0);
  const int tid = static_cast<int>(threadIdx.x);
  const int grp = tid / kGroup, lane = tid % kGroup;

  float qr[kPerLane];
  load_lanes(qr, q + q_index(s, b, t, h), s.HD, lane, true);
  // Unrolled by 4: a group's dots are independent, so four keys' loads are in flight at once
  // (a decode step has few blocks per SM to hide a load's latency behind).
#pragma unroll 4
  for (int i = 0; i < kSplitKeys / kGroups; ++i) {
    const int c = grp + kGroups * i;
    const float dot = lanes_dot(qr, k + kv_index(s, b, j0 + (c < n ? c : 0), g), s.HD, lane);
    if (lane == 0)
      w[c] = c < n && key_visible(key_valid, b, s.Smax, j0 + c, 0, p) ? dot * s.scale : -INFINITY;
  }
  __syncthreads();
  const float sc = w[tid];
  const float m = tree_reduce<true>(sc, parts);
  const float e = sc == -INFINITY ? 0.0f : expf(sc - m);  // m = −inf only if every sc is
  w[tid] = e;                                             // each thread rewrites only its own key
  const float l = tree_reduce<false>(e, parts);           // its barriers also publish w

  const int nparts = kThreads / static_cast<int>(s.HD);  // HD <= 256: at least one
  const int r = tid / static_cast<int>(s.HD), d = tid % static_cast<int>(s.HD);
  if (r < nparts) {
    const int64_t per = (n + nparts - 1) / nparts;
    const int64_t c0 = r * per, c1 = c0 + per < n ? c0 + per : n;
    float acc = 0.0f;
    // Hidden keys inside [0, n) weigh 0 and hold finite values (the forward wrote them).
    // Unrolled by 8 for the same reason: the loads are independent, the sum stays in key order.
#pragma unroll 8
    for (int64_t c = c0; c < c1; ++c) acc += w[c] * v[kv_index(s, b, j0 + c, g) + d];
    parts[r * s.HD + d] = acc;
  }
  __syncthreads();
  float* out = work + partial_index(s, split, row, h);
  if (tid < s.HD) {
    float sum = parts[tid];
    for (int rr = 1; rr < nparts; ++rr) sum += parts[rr * s.HD + tid];
    out[2 + tid] = sum;
  }
  if (tid == 0) {
    out[0] = m;
    out[1] = l;
  }
}

// grid: (B·T, NH), kThreads; thread d < HD writes out_d.
//   out: (B, T, NH, HD)   lse: (B, T, NH) or null
__global__ void attention_split_merge_kernel(float* out, float* lse, const float* work, Dims s,
                                             int64_t splits) {
  const int64_t row = blockIdx.x, h = blockIdx.y;
  const int d = static_cast<int>(threadIdx.x);
  float M = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp) M = fmaxf(M, work[partial_index(s, sp, row, h)]);
  float L = 0.0f, O = 0.0f;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const float* part = work + partial_index(s, sp, row, h);
    const float f = part[0] == -INFINITY ? 0.0f : expf(part[0] - M);
    L += f * part[1];
    if (d < s.HD) O += f * part[2 + d];
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  if (d < s.HD) out[(row * s.NH + h) * s.HD + d] = O * inv;
  if (lse != nullptr && d == 0) lse[row * s.NH + h] = L > 0.0f ? M + logf(L) : -INFINITY;
}

}  // namespace

void attention_forward_split(void* work, int64_t work_bytes, float* out, float* lse, const float* q,
                             const float* k, const float* v, const uint8_t* key_valid,
                             const ops::AttentionShape& shape, const Stream& stream) {
  const char* op = "gpu::attention_forward_split";
  const Dims s = checked_dims(shape, op);
  if (s.T > kSplitMaxQueries)
    throw Internal(std::string(op) + ": " + std::to_string(s.T) + " queries per row; it takes " +
                   std::to_string(kSplitMaxQueries) + " at most");
  if (s.B == 0 || s.T == 0) return;
  const int64_t need = split_attention_workspace_bytes(s.B, s.T, s.past + s.T, s.NH, s.HD);
  if (work == nullptr || work_bytes < need)
    throw Internal(std::string(op) + ": workspace of " + std::to_string(work_bytes) +
                   " bytes, needs " + std::to_string(need));
  if (s.B * s.T > 65535) throw Internal(std::string(op) + ": B·T beyond one grid dimension");
  const int64_t splits = split_key_blocks(s.past + s.T);
  auto* partials = static_cast<float*>(work);
  const dim3 grid(rows_grid(splits, op), static_cast<unsigned>(s.NH),
                  static_cast<unsigned>(s.B * s.T));
  attention_split_partial_kernel<<<grid, kThreads, 0, stream_of(stream)>>>(partials, q, k, v,
                                                                           key_valid, s);
  GPU_CHECK_LAUNCH();
  const dim3 merge_grid(static_cast<unsigned>(s.B * s.T), static_cast<unsigned>(s.NH));
  attention_split_merge_kernel<<<merge_grid, kThreads, 0, stream_of(stream)>>>(out, lse, partials,
                                                                               s, splits);
  GPU_CHECK_LAUNCH();
}

}  // namespace medtune::gpu
