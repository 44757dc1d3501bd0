// Causal GQA attention, forward and backward (ops.h), flash-style: scores are formed tile by tile
// in registers and shared memory, never as a (T, T) matrix in device memory; the forward keeps
// each query row's logsumexp so that the backward recomputes P = exp(s − lse) exactly once per
// pair without a second softmax pass.
//
// Same semantics as src/ops/cpu/attention.cpp / attention_backward.cpp (derivations there):
// query head h reads kv head h / (NH / NKV); scale 1/sqrt(HD); key j visible to the query at
// absolute position p = past + t when lo <= j <= p and key_valid (if any) is set, lo = seg_start
// (packed rows) or 0; a query with no visible key outputs zeros and gets zero gradient.
//
// Thread layout (independent of the warp size): blocks of 16 row groups of 16 lanes
// (gpu/attention_lanes.h). Every shuffle and barrier is reached by all threads: rows past T and
// hidden keys are masked by value, never by skipping a shuffle.
//
// Reduction order (what tests/gpu/cases_attention.cpp bounds): a dot product over HD is
// ceil(HD/16) serial products per lane then a 4-level tree; the forward's Σ p and Σ p·v run
// serially over the row's keys in key order, rescaled once per key tile of kKeyTile keys; dK and
// dV sum serially over (head of the group, query) in that order; dQ over keys in order. No
// atomics: results are deterministic.
#include <string>

#include "core/error.h"
#include "gpu/attention_lanes.h"
#include "gpu/launch.h"
#include "gpu/ops.h"

namespace medtune::gpu {

namespace {

using namespace attn;  // the row groups, Dims, key_visible (gpu/attention_lanes.h)

constexpr int kKeyTile = 16;  // keys per shared-memory tile

// Loads rows [j0, j0 + kKeyTile) of a (B, Smax, NKV, HD) tensor, kv head g, into tile
// (kKeyTile, HD); rows at or past `end` become zeros. All threads of the block call it.
__device__ inline void load_kv_tile(float* tile, const float* src, const Dims& s, int64_t b,
                                    int64_t g, int64_t j0, int64_t end) {
  for (int64_t i = threadIdx.x; i < kKeyTile * s.HD; i += blockDim.x) {
    const int64_t r = i / s.HD, d = i % s.HD, j = j0 + r;
    tile[i] = j < end ? src[kv_index(s, b, j, g) + d] : 0.0f;
  }
}

// ------------------------------------------------------------------------------------ forward
// grid: (ceil(T / 16), NH, B), kThreads. One row group per query row t of the block.
//   out: (B, T, NH, HD)   lse: (B, T, NH) or null (−inf for a row with no visible key)
__global__ void attention_forward_kernel(float* out, float* lse, const float* q, const float* k,
                                         const float* v, const uint8_t* key_valid,
                                         const int64_t* seg_start, Dims s) {
  __shared__ float k_tile[kKeyTile * kMaxHD];  // (kKeyTile, HD)
  __shared__ float v_tile[kKeyTile * kMaxHD];  // (kKeyTile, HD)
  __shared__ int64_t row_lo[kGroups];
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.NH / s.NKV);
  const int grp = static_cast<int>(threadIdx.x) / kGroup, lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kGroups;
  const int64_t t = t0 + grp;
  const bool row_ok = t < s.T;
  const int64_t p = s.past + t;  // absolute position of this row's query
  const int64_t lo = row_ok && seg_start != nullptr ? seg_start[b * s.T + t] : 0;
  if (lane == 0) row_lo[grp] = row_ok ? lo : INT64_MAX;
  __syncthreads();
  // Keys the block needs: [min lo, past + last row].
  int64_t k_begin = row_lo[0];
  for (int i = 1; i < kGroups; ++i) k_begin = row_lo[i] < k_begin ? row_lo[i] : k_begin;
  const int64_t t_last = (t0 + kGroups < s.T ? t0 + kGroups : s.T) - 1;
  const int64_t k_end = s.past + t_last + 1;

  float qr[kPerLane], acc[kPerLane];  // q row (scaled below through the scores), Σ p·v
  load_lanes(qr, q + q_index(s, b, row_ok ? t : 0, h), s.HD, lane, row_ok);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // running max and Σ exp(s − m)

  for (int64_t j0 = k_begin; j0 < k_end; j0 += kKeyTile) {
    __syncthreads();  // the previous tile is no longer read
    load_kv_tile(k_tile, k, s, b, g, j0, k_end);
    load_kv_tile(v_tile, v, s, b, g, j0, k_end);
    __syncthreads();
    float sc[kKeyTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kKeyTile; ++c) {
      const float dot = lanes_dot(qr, k_tile + c * s.HD, s.HD, lane);
      const bool vis = row_ok && key_visible(key_valid, b, s.Smax, j0 + c, lo, p);
      sc[c] = vis ? dot * s.scale : -INFINITY;
      tile_max = fmaxf(tile_max, sc[c]);
    }
    const float m_new = fmaxf(m, tile_max);
    // Nothing visible yet (m_new = −inf): o and l stay 0. Differs between row groups, so no
    // barrier or shuffle inside.
    if (m_new != -INFINITY) {
      // o and l are scaled by the same rounded factor, so its rounding cancels in o / l.
      const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
      l *= corr;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
#pragma unroll
      for (int c = 0; c < kKeyTile; ++c) {
        const float pc = sc[c] == -INFINITY ? 0.0f : expf(sc[c] - m_new);
        l += pc;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int64_t d = lane + kGroup * i;
          if (d < s.HD) acc[i] += pc * v_tile[c * s.HD + d];
        }
      }
      m = m_new;
    }
  }
  if (!row_ok) return;
  float* o = out + q_index(s, b, t, h);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + kGroup * i;
    if (d < s.HD) o[d] = acc[i] * inv;
  }
  if (lse != nullptr && lane == 0) lse[(b * s.T + t) * s.NH + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// ----------------------------------------------------------------------------------- backward
// P_tj = exp(s_tj − lse_t) for a visible pair (0 otherwise, and for a row with lse = −inf);
// dS_tj = P_tj·(dP_tj − D_t)·scale with dP_tj = dO_t·v_j and D_t = dO_t·O_t.
__device__ inline float prob(float score, float lse_t, bool vis) {
  return vis && lse_t != -INFINITY ? expf(score - lse_t) : 0.0f;
}

// dQ. grid: (ceil(T / 16), NH, B). One row group per query row; keys [lo, t] in tiles.
__global__ void attention_backward_dq_kernel(float* dq, const float* dout, const float* out,
                                             const float* lse, const float* q, const float* k,
                                             const float* v, const uint8_t* key_valid,
                                             const int64_t* seg_start, Dims s) {
  __shared__ float k_tile[kKeyTile * kMaxHD];  // (kKeyTile, HD)
  __shared__ float v_tile[kKeyTile * kMaxHD];  // (kKeyTile, HD)
  __shared__ int64_t row_lo[kGroups];
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (s.NH / s.NKV);
  const int grp = static_cast<int>(threadIdx.x) / kGroup, lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kGroups, t = t0 + grp;
  const bool row_ok = t < s.T;
  const int64_t lo = row_ok && seg_start != nullptr ? seg_start[b * s.T + t] : 0;
  if (lane == 0) row_lo[grp] = row_ok ? lo : INT64_MAX;
  __syncthreads();
  int64_t k_begin = row_lo[0];
  for (int i = 1; i < kGroups; ++i) k_begin = row_lo[i] < k_begin ? row_lo[i] : k_begin;
  const int64_t k_end = (t0 + kGroups < s.T ? t0 + kGroups : s.T);  // past = 0

  const int64_t row = q_index(s, b, row_ok ? t : 0, h);
  float qr[kPerLane], dor[kPerLane], acc[kPerLane];
  load_lanes(qr, q + row, s.HD, lane, row_ok);
  load_lanes(dor, dout + row, s.HD, lane, row_ok);
  const float D = lanes_dot(dor, out + row, s.HD, lane);
  const float lse_t = row_ok ? lse[(b * s.T + t) * s.NH + h] : -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;

  for (int64_t j0 = k_begin; j0 < k_end; j0 += kKeyTile) {
    __syncthreads();
    load_kv_tile(k_tile, k, s, b, g, j0, k_end);
    load_kv_tile(v_tile, v, s, b, g, j0, k_end);
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kKeyTile; ++c) {
      const float* kc = k_tile + c * s.HD;
      const float sc = lanes_dot(qr, kc, s.HD, lane) * s.scale;
      const float dp = lanes_dot(dor, v_tile + c * s.HD, s.HD, lane);
      const bool vis = row_ok && key_visible(key_valid, b, s.Smax, j0 + c, lo, t);
      const float ds = prob(sc, lse_t, vis) * (dp - D) * s.scale;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int64_t d = lane + kGroup * i;
        if (d < s.HD) acc[i] += ds * kc[d];
      }
    }
  }
  if (!row_ok) return;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + kGroup * i;
    if (d < s.HD) dq[row + d] = acc[i];
  }
}

// dK, dV. grid: (ceil(Smax / 16), NKV, B). One row group per key j; the block walks the query
// rows t >= its first key (causal) of every head of the kv group, kKeyTile rows at a time, with
// their q, dO in shared memory. Keys at or past T (cache rows without queries) get zeros.
__global__ void attention_backward_dkv_kernel(float* dk, float* dv, const float* dout,
                                              const float* out, const float* lse, const float* q,
                                              const float* k, const float* v,
                                              const uint8_t* key_valid, const int64_t* seg_start,
                                              Dims s) {
  __shared__ float q_tile[kKeyTile * kMaxHD];   // (kKeyTile query rows, HD)
  __shared__ float do_tile[kKeyTile * kMaxHD];  // (kKeyTile query rows, HD)
  __shared__ float lse_tile[kKeyTile], d_tile[kKeyTile];
  __shared__ int64_t lo_tile[kKeyTile];
  const int64_t b = blockIdx.z, g = blockIdx.y, group = s.NH / s.NKV;
  const int grp = static_cast<int>(threadIdx.x) / kGroup, lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kGroups, j = j0 + grp;
  const bool key_ok = j < s.T;  // j < Smax always holds for the rows written below
  const bool key_valid_j = key_ok && (key_valid == nullptr || key_valid[b * s.Smax + j] != 0);

  float kr[kPerLane], vr[kPerLane], dk_acc[kPerLane], dv_acc[kPerLane];
  load_lanes(kr, k + kv_index(s, b, key_ok ? j : 0, g), s.HD, lane, key_ok);
  load_lanes(vr, v + kv_index(s, b, key_ok ? j : 0, g), s.HD, lane, key_ok);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dk_acc[i] = dv_acc[i] = 0.0f;

  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = g * group + hh;
    for (int64_t r0 = j0; r0 < s.T; r0 += kKeyTile) {
      __syncthreads();
      for (int64_t i = threadIdx.x; i < kKeyTile * s.HD; i += blockDim.x) {
        const int64_t r = r0 + i / s.HD, d = i % s.HD;
        q_tile[i] = r < s.T ? q[q_index(s, b, r, h) + d] : 0.0f;
        do_tile[i] = r < s.T ? dout[q_index(s, b, r, h) + d] : 0.0f;
      }
      // Row statistics: group c < kKeyTile computes D of row r0 + c (all groups shuffle).
      {
        const int c = grp % kKeyTile;
        const int64_t r = r0 + c;
        float dot = 0.0f;
        if (r < s.T)
          for (int64_t d = lane; d < s.HD; d += kGroup) dot += dout[q_index(s, b, r, h) + d] * out[q_index(s, b, r, h) + d];
        dot = group_sum(dot);
        if (grp < kKeyTile && lane == 0) {
          d_tile[c] = dot;
          lse_tile[c] = r < s.T ? lse[(b * s.T + r) * s.NH + h] : -INFINITY;
          lo_tile[c] = r < s.T && seg_start != nullptr ? seg_start[b * s.T + r] : 0;
        }
      }
      __syncthreads();
#pragma unroll 4
      for (int c = 0; c < kKeyTile; ++c) {
        const int64_t r = r0 + c;
        const float* qc = q_tile + c * s.HD;
        const float* doc = do_tile + c * s.HD;
        const float sc = lanes_dot(kr, qc, s.HD, lane) * s.scale;
        const float dp = lanes_dot(vr, doc, s.HD, lane);
        const bool vis = key_valid_j && r < s.T && j >= lo_tile[c] && j <= r;
        const float pr = prob(sc, lse_tile[c], vis);
        const float ds = pr * (dp - d_tile[c]) * s.scale;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int64_t d = lane + kGroup * i;
          if (d < s.HD) {
            dv_acc[i] += pr * doc[d];
            dk_acc[i] += ds * qc[d];
          }
        }
      }
    }
  }
  if (j >= s.Smax) return;
  const int64_t base = kv_index(s, b, j, g);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + kGroup * i;
    if (d < s.HD) {
      dk[base + d] = key_ok ? dk_acc[i] : 0.0f;
      dv[base + d] = key_ok ? dv_acc[i] : 0.0f;
    }
  }
}

unsigned tiles(int64_t n, const char* op) { return rows_grid((n + kGroups - 1) / kGroups, op); }

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start,
                       const ops::AttentionShape& shape, const Stream& stream) {
  const Dims s = checked_dims(shape, "gpu::attention_forward");
  if (seg_start != nullptr && s.past != 0)
    throw Internal("gpu::attention_forward: packed rows (seg_start) need past = 0, got " +
                   std::to_string(s.past));
  if (s.B == 0 || s.T == 0) return;
  const dim3 grid(tiles(s.T, "gpu::attention_forward"), static_cast<unsigned>(s.NH),
                  static_cast<unsigned>(s.B));
  attention_forward_kernel<<<grid, kThreads, 0, stream_of(stream)>>>(out, lse, q, k, v, key_valid,
                                                                    seg_start, s);
  GPU_CHECK_LAUNCH();
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const uint8_t* key_valid, const int64_t* seg_start,
                        const ops::AttentionShape& shape, const Stream& stream) {
  const Dims s = checked_dims(shape, "gpu::attention_backward");
  if (s.past != 0)
    throw Internal("gpu::attention_backward: past = " + std::to_string(s.past) +
                   ", but the backward supports only training (past = 0)");
  if (s.B == 0) return;
  if (s.T > 0) {
    const dim3 grid(tiles(s.T, "gpu::attention_backward"), static_cast<unsigned>(s.NH),
                    static_cast<unsigned>(s.B));
    attention_backward_dq_kernel<<<grid, kThreads, 0, stream_of(stream)>>>(
        dq, dout, out, lse, q, k, v, key_valid, seg_start, s);
    GPU_CHECK_LAUNCH();
  }
  if (s.Smax > 0) {
    const dim3 grid(tiles(s.Smax, "gpu::attention_backward"), static_cast<unsigned>(s.NKV),
                    static_cast<unsigned>(s.B));
    attention_backward_dkv_kernel<<<grid, kThreads, 0, stream_of(stream)>>>(
        dk, dv, dout, out, lse, q, k, v, key_valid, seg_start, s);
    GPU_CHECK_LAUNCH();
  }
}

}  // namespace medtune::gpu
