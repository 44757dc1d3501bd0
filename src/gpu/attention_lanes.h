// The row-group layout shared by the GPU attention kernels that work on head-dim vectors in
// registers (gpu/attention.cu: the tiled kernel; gpu/attention_split.cu: the split-key decode
// kernel). Device code; included by .cu files only.
//
// A block of kThreads = 256 threads is 16 "row groups" of kGroup = 16 lanes. 16 divides both warp
// sizes (32, 64), so a group never straddles a warp and its reductions are width-16 butterflies
// (shfl_xor with width, vendor.h). Lane l of a group holds the head-dim elements d = l, l + 16,
// ... (at most kMaxHD / 16 = 16 of them). A dot product over HD is therefore ceil(HD / 16) serial
// products per lane, then a 4-level tree (what tests/gpu/cases_attention.cpp bounds).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "gpu/launch.h"
#include "ops/ops.h"

namespace medtune::gpu::attn {

inline constexpr int kGroup = 16;                  // lanes per row group
inline constexpr int kGroups = kThreads / kGroup;  // 16 row groups per block
inline constexpr int kMaxHD = 256;                 // head_dim limit (Llama: 64 or 128)
inline constexpr int kPerLane = kMaxHD / kGroup;   // head-dim elements per lane
static_assert(kThreads % kGroup == 0 && kGroup <= 32, "row groups must fit in the narrowest warp");

__device__ inline float group_sum(float v) {
  return warp_sum(v, kGroup);
}

// Key j is visible to the query at absolute position p of row b (ops/cpu/attention_mask.h).
__device__ inline bool key_visible(const uint8_t* key_valid, int64_t b, int64_t Smax, int64_t j,
                                   int64_t lo, int64_t p) {
  return j >= lo && j <= p && (key_valid == nullptr || key_valid[b * Smax + j] != 0);
}

struct Dims {
  int64_t B, T, past, Smax, NH, NKV, HD;
  float scale;
};

// q, out: (B, T, NH, HD); k, v: (B, Smax, NKV, HD).
__device__ inline int64_t q_index(const Dims& s, int64_t b, int64_t t, int64_t h) {
  return ((b * s.T + t) * s.NH + h) * s.HD;
}
__device__ inline int64_t kv_index(const Dims& s, int64_t b, int64_t j, int64_t g) {
  return ((b * s.Smax + j) * s.NKV + g) * s.HD;
}

// Lane-held slice of a head-dim vector: x[i] = v[lane + 16 i], zeros past HD.
__device__ inline void load_lanes(float (&x)[kPerLane], const float* v, int64_t HD, int lane,
                                  bool valid) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + kGroup * i;
    x[i] = valid && d < HD ? v[d] : 0.0f;
  }
}
// x . row over the group's 16 lanes (every lane gets the sum).
__device__ inline float lanes_dot(const float (&x)[kPerLane], const float* row, int64_t HD,
                                  int lane) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + kGroup * i;
    if (d < HD) acc += x[i] * row[d];
  }
  return group_sum(acc);
}

// The kernels' dims, after the shape checks every attention op makes (Internal naming `op`).
inline Dims checked_dims(const ops::AttentionShape& s, const char* op) {
  check_attention_shape(s, op);
  if (s.HD > kMaxHD)
    throw Internal(std::string(op) + ": head_dim " + std::to_string(s.HD) + " > " +
                   std::to_string(kMaxHD) + " is not supported by the GPU kernel");
  if (s.B > 65535 || s.NH > 65535)
    throw Internal(std::string(op) + ": B or NH beyond one grid dimension");
  return {s.B, s.T, s.past, s.Smax, s.NH, s.NKV, s.HD, 1.0f / sqrtf(static_cast<float>(s.HD))};
}

}  // namespace medtune::gpu::attn
