// How the GPU's GEMM attention (gpu/attention_gemm.cu) splits a call and how much workspace it
// takes: plain C++, no vendor header, so that the device memory plans (model/inference_plan.h,
// train/memory_plan.h) count the same bytes the kernels allocate, and CPU tests check the split.
//
// The GEMM attention materializes the scores of one batch row's query heads, (T, n) fp32 each
// (n = past + T keys), a chunk of key/value heads at a time: for one kv head g the chunk holds
// its `group` = NH / NKV query heads' scores (and in the backward their dP too). A chunk is as
// many kv heads as fit kMaxScoreBytes; a call whose single kv head does not fit (long rows:
// group x T x n x 8 bytes > 256 MiB, e.g. T = n > 5792 for MHA, > 2896 for Llama-3's group of
// 4) takes the tiled kernel instead (gpu/attention.cu), which needs no workspace.
//
// Calls of at most kSplitMaxQueries queries per row (decode steps) take the split-key kernel
// (gpu/attention_split.cu): each block scores one query row's head against kSplitKeys keys, and
// its partial result (max, sum of weights, weighted values: HD + 2 floats) waits in a workspace
// for the merge across the row's blocks.
#pragma once

#include <algorithm>
#include <cstdint>

namespace medtune::gpu {

// The most bytes of scores (and dP) a chunk holds: 256 MiB.
inline constexpr int64_t kMaxScoreBytes = int64_t{256} << 20;
// Calls with fewer queries per row take the tiled kernel: a GEMM of a few rows is no faster
// than the tiled kernel's one pass over the keys (decode steps are T = 1), and it would need
// the workspace that a decode step otherwise does without.
inline constexpr int64_t kMinGemmQueries = 16;

struct AttentionGemmPlan {
  bool use = false;           // false: the tiled kernel
  int64_t per_kv_bytes = 0;   // one kv head's scores (and dP in the backward)
  int64_t kv_per_chunk = 0;   // kv heads per chunk (1 .. NKV)
  int64_t score_bytes = 0;    // one chunk's scores (and dP)
  int64_t rowstat_bytes = 0;  // backward: D = rowsum(dO * O), (B, T, NH) fp32
  // The workspace the callers allocate: row statistics first, then the chunk's scores.
  int64_t workspace_bytes() const { return rowstat_bytes + score_bytes; }
};

// Rounded up to 256 bytes, as the two parts are placed one after the other in one buffer.
inline int64_t round_up_256(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// B rows of T queries against n = past + T keys, NH query heads over NKV kv heads.
inline AttentionGemmPlan plan_attention_gemm(int64_t B, int64_t T, int64_t n, int64_t NH,
                                             int64_t NKV, bool backward) {
  AttentionGemmPlan p;
  if (B <= 0 || T < kMinGemmQueries || n <= 0 || NKV <= 0 || NH % NKV != 0) return p;
  const int64_t group = NH / NKV;
  const int64_t per_kv = group * T * n * 4 * (backward ? 2 : 1);  // bytes of one kv head's scores
  if (per_kv > kMaxScoreBytes) return p;
  p.use = true;
  p.per_kv_bytes = per_kv;
  p.kv_per_chunk = std::min(NKV, kMaxScoreBytes / per_kv);
  p.score_bytes = round_up_256(p.kv_per_chunk * per_kv);
  p.rowstat_bytes = backward ? round_up_256(B * T * NH * 4) : 0;
  return p;
}

// The split-key kernel: queries per row it takes, keys per block, and its workspace for B rows
// of T queries against n = past + T keys (0 where it does not apply).
inline constexpr int64_t kSplitMaxQueries = 4;
inline constexpr int64_t kSplitKeys = 256;
inline int64_t split_key_blocks(int64_t n) { return (n + kSplitKeys - 1) / kSplitKeys; }
inline int64_t split_attention_workspace_bytes(int64_t B, int64_t T, int64_t n, int64_t NH,
                                               int64_t HD) {
  if (B <= 0 || T <= 0 || T > kSplitMaxQueries || n <= 0) return 0;
  return round_up_256(split_key_blocks(n) * B * T * NH * (HD + 2) * 4);
}

// The kv heads per chunk that a workspace of work_bytes holds (the kernels take as many as fit,
// so a test can force small chunks): 0 when it does not hold the row statistics and one kv head.
inline int64_t kv_heads_fitting(const AttentionGemmPlan& p, int64_t work_bytes, int64_t NKV) {
  if (!p.use || work_bytes < p.rowstat_bytes + p.per_kv_bytes) return 0;
  return std::min(NKV, (work_bytes - p.rowstat_bytes) / p.per_kv_bytes);
}

}  // namespace medtune::gpu
