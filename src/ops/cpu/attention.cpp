// Causal grouped-query attention on the CPU.
// Fast path: per (batch row, head), per segment (the whole row, or one example of a packed
// row) and per tile of kQueryTile queries, scores = Q K^T with BLAS into a (tile, n) scratch
// over the keys up to the tile's last query only (causal: about half the T x T products are
// skipped), masked softmax, out = P V with BLAS.
// The scratch is per thread, (T, S) or a packed row's longest example squared; on the CPU it is
// small next to the KV cache (T = S = 2048 is 16 MiB), so no flash-style tiling is needed here. A
// packed row's examples are separate blocks, so the scores between examples (all masked) are never
// computed. Per-query path (at most 4 queries per row after a cache, the decode steps; and every
// query of attention_forward_fixed_order): the same math with AVX2 loops instead of BLAS, each
// query in one fixed order (four consecutive queries share their key and value loads). BLAS's
// small-matrix kernels were slow on the decode steps' 1 x n products (BENCHMARKS.md: Q8_0 decode
// at 256-320 cached positions, 1.12x), and BLAS's order for a query depends on the tile it falls
// in, which the fixed-order callers cannot have. The per-query path also reads a half-precision
// cache (the int8 route's, model/kv_cache.h), widening each element as it loads it. On long calls
// with AVX-512 the scores go against each task's keys transposed (attention_keys16.h): the same
// operations on each score, without the horizontal adds; and the weighted values on 512-bit
// registers (the same chains per element, half the instructions).
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "ops/cpu/attention_keys16.h"
#include "ops/cpu/attention_mask.h"
#include "ops/ops.h"

namespace medtune::ops {

using detail::visible;

namespace ref {
void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  detail::check_segments(seg_start, s, "attention_forward");
  const int64_t group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  std::vector<double> w(static_cast<size_t>(s.past + s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t p = s.past + t, g = h / group, lo = detail::segment_lo(seg_start, b, s.T, t);
        const float* qv = q + ((b * s.T + t) * s.NH + h) * s.HD;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
          const float* kv = k + ((b * s.Smax + j) * s.NKV + g) * s.HD;
          double dot = 0;
          for (int64_t d = 0; d < s.HD; ++d) dot += static_cast<double>(qv[d]) * static_cast<double>(kv[d]);
          w[static_cast<size_t>(j)] = dot * scale;
          mx = std::fmax(mx, w[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
          w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - mx);
          sum += w[static_cast<size_t>(j)];
        }
        float* o = out + ((b * s.T + t) * s.NH + h) * s.HD;
        for (int64_t d = 0; d < s.HD; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j) {
            if (!visible(key_valid, b, s.Smax, j, lo, p)) continue;
            acc += w[static_cast<size_t>(j)] * static_cast<double>(v[((b * s.Smax + j) * s.NKV + g) * s.HD + d]);
          }
          o[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
}
}  // namespace ref

namespace detail {
bool keys16_available() {
  static const bool available = active_isa() >= Isa::kAvx512Vnni;
  return available;
}
}  // namespace detail

namespace {

// Queries per row at or below which attention_forward takes the decode path: OpenBLAS's
// small-matrix kernels, two calls per (head, query) for 1 x HD by HD x n products, were ~14% of a
// Q8_0 int8 decode step's CPU time at 256-320 cached positions.
constexpr int64_t kDecodeMaxQueries = 4;

// [dot(a0), dot(a1), dot(a2), dot(a3)] of four 8-lane partial sums: the one tree of adds that
// every key's 8 lanes go through, whichever of the four places it takes (each output depends on
// its own input's lanes only, so a lone key's zero partners change nothing).
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Eight keys' or values' elements as fp32: E = float (an fp32 cache, a task's copy) or uint16_t
// (an IEEE half cache, attention_forward_fixed_order's second form): half widens to fp32 exactly,
// so every operation after the load is the same as on the widened values stored as fp32.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// One query's score against one key row: the 8-lane chain over c in order, then reduce4, times
// scale. Every path below computes each (query, key) score exactly so.
template <int C, typename E>
float one_score(const float* qv, const E* kj, __m128 sc) {
  __m256 a = _mm256_setzero_ps();
  for (int c = 0; c < C; ++c) a = _mm256_fmadd_ps(_mm256_loadu_ps(qv + 8 * c), load8(kj + 8 * c), a);
  const __m256 z = _mm256_setzero_ps();
  return _mm_cvtss_f32(_mm_mul_ps(reduce4(a, z, z, z), sc));
}

// Where a head's value rows are: chunk pair c2 (floats 16 * c2 .. 16 * c2 + 15) of key j's row at
// at(j, c2) = base + c2 * plane + j * row. In the K/V cache's own layout plane = 16 and row = the
// cache's row stride; in a task's gathered copy (attention_forward_per_query) each chunk pair of
// all keys is contiguous: plane = 16 * keys, row = 16.
template <typename E>
struct ValueRows {
  const E* base;
  int64_t plane, row;
  const E* at(int64_t j, int c2) const { return base + c2 * plane + j * row; }
};

// Where a head's keys are: key j's row at rows + j * stride (the cache, or a task's copy), or,
// where transposed is set, a task's copy transposed 16 keys to a block (attention_keys16.h), whose
// scores have the same bits.
template <typename E>
struct KeyRows {
  const E* rows;
  int64_t stride;
  const float* transposed = nullptr;
};

// The floats between two rows of a task's scores: n_max rounded up to a block of transposed keys
// (scores_keys16 writes whole blocks).
inline int64_t score_stride(const AttentionShape& s) {
  return (s.past + s.T + detail::kKeyBlock - 1) / detail::kKeyBlock * detail::kKeyBlock;
}

// Queries computed together, sharing each key and value row's loads: four consecutive queries of
// one head on long calls (query i sees keys [0, n0 + i): a prompt's keys and values leave the L2
// cache from a few hundred tokens on, and four together read them a quarter as often), or up to
// four heads of one kv head at one position (all see keys [0, n0): a decode step's heads read
// their kv head's rows once). The arithmetic stays each query's own, bit for bit that of one
// query alone.
constexpr int kGroup = 4;

// The scores of G <= kGroup queries (query i sees keys [0, n0 + Step * i): Step 1 for consecutive
// queries, q rows q_stride apart; Step 0 for heads at one position, q rows HD = 8 C apart, a
// constant the decode loop is compiled with, q_stride unused): keys [0, n0) two at a time for
// all G, then each query's own last keys. scores[i][j] = scale * (q_i . K_j), HD = 8 * C; every
// score is one_score's (reduce4 reduces each input by the same tree whatever its slot).
template <int C, int G, int Step, typename E>
void group_scores(float* const scores[kGroup], const float* qv, int64_t q_stride, const E* kb,
                  int64_t kv_stride, int64_t n0, float scale) {
  static_assert(G >= 1 && G <= kGroup, "up to four queries at a time");
  const int64_t qs = Step == 0 ? 8 * C : q_stride;
  const __m128 sc = _mm_set1_ps(scale);
  const __m256 z = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 2 <= n0; j += 2) {
    const E* k0 = kb + j * kv_stride;
    const E* k1 = k0 + kv_stride;
    __m256 a[kGroup][2];
    for (auto& ai : a) ai[0] = ai[1] = z;
    for (int c = 0; c < C; ++c) {
      const __m256 x0 = load8(k0 + 8 * c), x1 = load8(k1 + 8 * c);
      for (int i = 0; i < G; ++i) {
        const __m256 qc = _mm256_loadu_ps(qv + i * qs + 8 * c);
        a[i][0] = _mm256_fmadd_ps(qc, x0, a[i][0]);
        a[i][1] = _mm256_fmadd_ps(qc, x1, a[i][1]);
      }
    }
    alignas(16) float t[8];  // (query 0: keys j, j+1), (query 1: ...), ...
    _mm_store_ps(t, _mm_mul_ps(reduce4(a[0][0], a[0][1], a[1][0], a[1][1]), sc));
    if (G > 2) _mm_store_ps(t + 4, _mm_mul_ps(reduce4(a[2][0], a[2][1], a[3][0], a[3][1]), sc));
    for (int i = 0; i < G; ++i) {
      scores[i][j] = t[2 * i];
      scores[i][j + 1] = t[2 * i + 1];
    }
  }
  for (int i = 0; i < G; ++i)
    for (int64_t jj = j; jj < n0 + Step * i; ++jj)
      scores[i][jj] = one_score<C>(qv + i * qs, kb + jj * kv_stride, sc);
}

// Chunks [c0, c0 + K) of group_weighted_values's outputs (below): K accumulators per query, one
// chain each over the keys in order. Every key's G weights are broadcast once for the K chunks.
template <int C, int G, int Step, int K, typename E>
inline void weighted_values_chunks(float* o, int64_t os, const float* const p[kGroup],
                                   const ValueRows<E>& vr, int64_t n0, int c0) {
  static_assert(K % 2 == 0, "value rows go in pairs of 8-float chunks");
  __m256 acc[G][K];  // (query, chunk c0 + k)
  for (auto& ai : acc)
#pragma GCC unroll 8
    for (auto& a : ai) a = _mm256_setzero_ps();
  for (int64_t j = 0; j < n0; ++j) {
    __m256 wb[G];
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) wb[i] = _mm256_set1_ps(p[i][j]);
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      const __m256 x = load8(vr.at(j, c0 / 2 + k / 2) + 8 * (k % 2));
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) acc[i][k] = _mm256_fmadd_ps(wb[i], x, acc[i][k]);
    }
  }
  for (int i = 0; i < G; ++i) {
    for (int64_t j = n0; j < n0 + Step * i; ++j) {
      const __m256 wb = _mm256_set1_ps(p[i][j]);
      for (int k = 0; k < K; ++k)
        acc[i][k] = _mm256_fmadd_ps(wb, load8(vr.at(j, c0 / 2 + k / 2) + 8 * (k % 2)), acc[i][k]);
    }
    for (int k = 0; k < K; ++k) _mm256_storeu_ps(o + i * os + 8 * (c0 + k), acc[i][k]);
  }
}

// o_i (HD = 8 * C; outputs o_stride apart, or HD for Step 0) = sum over query i's keys of
// p[i][j] * V_j, for the same G queries: keys [0, n0) in order for all G, then each query's own
// last keys. Each accumulator lane is one chain over the keys in order, so how many chunks of the
// row a pass takes changes no bit. A chain waits an FMA's latency per key: two chunks per pass
// (what every G took before) left one or two queries' passes waiting on their 2-4 chains; a pass
// now keeps 8-12 chains in flight within the 16 ymm registers: 8 chunks for one query, 4 for two
// or three (3 x 4 accumulators, 3 weights and a value row), 2 for four. One decode step's
// attention, Zen 3, one thread (`bench_attention --decode 1 --threads 1`, medians of 6-10
// alternating runs, before/after): 32 heads of 128 without GQA (Llama 2) 1.82x at 256 cached keys,
// 1.69x at 1024; 8 heads on 4 kv heads (G = 2) 1.35-1.39x; SmolLM2's 9 on 3 (G = 3) 1.12-1.15x;
// four queries per kv head the same. A zero weight (a hidden key, an underflowed one)
// is multiplied too, in every path, without a branch (an unpredictable one cost more than the
// FMAs it saved): it adds a zero, which leaves the sum as it was up to the sign of a zero sum,
// given finite values, which every key position up to the query's has (the forward wrote it).
// Chunks [c_begin, c_end) of each output row only (even bounds; the split decode path deals a
// row's chunk pairs to different threads): the same chains, so the same bits.
template <int C, int G, int Step, typename E>
void group_weighted_values(float* o, int64_t o_stride, const float* const p[kGroup],
                           const ValueRows<E>& vr, int64_t n0, int c_begin = 0, int c_end = C) {
  static_assert(C % 2 == 0, "value rows go two 8-float chunks per pass");
  constexpr int kWide = G == 1 ? 8 : G <= 3 ? 4 : 2;
  const int64_t os = Step == 0 ? 8 * C : o_stride;
  int c0 = c_begin;
  if constexpr (kWide >= 8)
    for (; c0 + 8 <= c_end; c0 += 8) weighted_values_chunks<C, G, Step, 8>(o, os, p, vr, n0, c0);
  if constexpr (kWide >= 4)
    for (; c0 + 4 <= c_end; c0 += 4) weighted_values_chunks<C, G, Step, 4>(o, os, p, vr, n0, c0);
  for (; c0 < c_end; c0 += 2) weighted_values_chunks<C, G, Step, 2>(o, os, p, vr, n0, c0);
}

// group_weighted_values, or where the keys were transposed (a task's copy, on AVX-512) the same
// on 512-bit registers over the copy's values (attention_keys16.h): the same bits, half the FMAs.
template <int C, int G, int Step, typename E>
void weighted_values(float* o, int64_t o_stride, const float* const p[kGroup],
                     const KeyRows<E>& keys, const ValueRows<E>& vr, int64_t n0) {
  if constexpr (std::is_same_v<E, float>) {
    if (keys.transposed != nullptr) {
      detail::weighted_values16(o, Step == 0 ? 8 * C : o_stride, p, G, Step, vr.base, vr.plane, n0,
                                8 * C);
      return;
    }
  }
  group_weighted_values<C, G, Step>(o, o_stride, p, vr, n0);
}

// softmax_visible_row for a query at position p of row b, which sees keys [0, n) (n = p + 1:
// all causally visible): on 512-bit registers where the keys were transposed (a task's copy, on
// AVX-512), with the same bits (attention_keys16.h).
template <typename E>
void softmax_query(float* row, int64_t n, const KeyRows<E>& keys, const uint8_t* key_valid,
                   int64_t b, int64_t p, const AttentionShape& s) {
  if (keys.transposed != nullptr)
    return detail::softmax_row16(row, n, key_valid == nullptr ? nullptr : key_valid + b * s.Smax);
  detail::softmax_visible_row(row, n, n, key_valid, b, s.Smax, 0, p);
}

// One query position's heads [h0, h0 + G) of batch row b: scores, softmax, weighted values.
template <int C, int G, typename E>
void heads_query(float* out, const float* q, const KeyRows<E>& keys, const ValueRows<E>& vr,
                 float* scores, int64_t b, int64_t h0, int64_t t, const uint8_t* key_valid,
                 const AttentionShape& s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t row = (b * s.T + t) * s.NH + h0, p = s.past + t, n = p + 1;
  float* rows[kGroup];
  for (int i = 0; i < kGroup; ++i) rows[i] = scores + i * score_stride(s);
  if (keys.transposed != nullptr)
    detail::scores_keys16(rows, G, q + row * s.HD, s.HD, keys.transposed, n, s.HD, scale);
  else
    group_scores<C, G, 0>(rows, q + row * s.HD, s.HD, keys.rows, keys.stride, n, scale);
  for (int i = 0; i < G; ++i) softmax_query(rows[i], n, keys, key_valid, b, p, s);
  weighted_values<C, G, 0>(out + row * s.HD, s.HD, rows, keys, vr, n);
}

// Queries per task of the per-query kernel on long calls (a fixed-order prompt): tasks are
// (row, key/value head, chunk of queries), dealt to the threads largest first so that the causal
// rows' growing key counts balance out. Which thread computes a query never changes its bits.
constexpr int64_t kPerQueryChunk = 16;

// One task's keys and values copied out of the cache as fp32 (contiguous, so their re-reads by
// the heads and query groups stay in L2): the cache's rows are NKV * HD elements apart, which at
// Llama's 8 x 128 fp32 is exactly 4 KiB, so one head's rows fall into a sixteenth of L2's sets and
// were re-read from L3 by every group of four queries. The values go chunk pair by chunk pair
// (ValueRows), the order group_weighted_values reads them in. A half cache is widened here, once.
// The keys go as rows, or transposed where the CPU has the kernels for that (attention_keys16.h).
template <int C, typename E>
void gather_head(float* kc, float* vc, const E* kb, const E* vb, int64_t kv_stride, int64_t n,
                 bool transposed) {
  if (transposed)
    detail::transpose_keys16(kc, kb, kv_stride, n, 8 * C);
  else
    for (int64_t j = 0; j < n; ++j)
      for (int c = 0; c < C; ++c) _mm256_storeu_ps(kc + j * 8 * C + 8 * c, load8(kb + j * kv_stride + 8 * c));
  for (int c2 = 0; c2 < C / 2; ++c2)
    for (int64_t j = 0; j < n; ++j)
      for (int e = 0; e < 2; ++e)
        _mm256_storeu_ps(vc + (c2 * n + j) * 16 + 8 * e, load8(vb + j * kv_stride + 16 * c2 + 8 * e));
}

// One task's queries: rows [t0, t1) of batch row b, query heads [h0, h1), against the keys and
// values vr (in the cache, or the task's copy). scores: (kGroup, score_stride(s)).
template <int C, typename E>
void task_queries(float* out, const float* q, const KeyRows<E>& keys, const ValueRows<E>& vr,
                  float* scores, int64_t b, int64_t h0, int64_t h1, int64_t t0, int64_t t1,
                  const uint8_t* key_valid, const AttentionShape& s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t q_stride = s.NH * s.HD;
  for (int64_t h = h0; h < h1; ++h) {
    int64_t t = t0;
    for (; t + kGroup <= t1; t += kGroup) {  // queries t .. t + 3: keys [0, p + 1 + i)
      const int64_t p = s.past + t, n0 = p + 1;
      float* rows[kGroup];
      for (int i = 0; i < kGroup; ++i) rows[i] = scores + i * score_stride(s);
      const float* qv = q + (b * s.T + t) * q_stride + h * s.HD;
      if (keys.transposed != nullptr)
        detail::scores_keys16(rows, kGroup, qv, q_stride, keys.transposed, n0 + kGroup - 1, s.HD,
                              scale);
      else
        group_scores<C, kGroup, 1>(rows, qv, q_stride, keys.rows, keys.stride, n0, scale);
      for (int i = 0; i < kGroup; ++i) softmax_query(rows[i], n0 + i, keys, key_valid, b, p + i, s);
      weighted_values<C, kGroup, 1>(out + (b * s.T + t) * q_stride + h * s.HD, q_stride, rows, keys,
                                    vr, n0);
    }
  }
  // The queries left over from the groups of four (all of a decode step's): the heads of the
  // task (one kv group) four at a time, sharing their keys' and values' loads.
  for (int64_t t = t0 + (t1 - t0) / kGroup * kGroup; t < t1; ++t)
    for (int64_t h = h0; h < h1; h += kGroup) {
      switch (std::min<int64_t>(kGroup, h1 - h)) {
        case 1: heads_query<C, 1>(out, q, keys, vr, scores, b, h, t, key_valid, s); break;
        case 2: heads_query<C, 2>(out, q, keys, vr, scores, b, h, t, key_valid, s); break;
        case 3: heads_query<C, 3>(out, q, keys, vr, scores, b, h, t, key_valid, s); break;
        default: heads_query<C, 4>(out, q, keys, vr, scores, b, h, t, key_valid, s); break;
      }
    }
}

// The decode path when its tasks (row, kv head) do not divide evenly among the threads. There a
// kv head per task left threads idle: SmolLM2's 3 kv heads on 2 threads gave one thread twice the
// other's attention (perf, Q4_1 int8 decode at 264-520 cached positions: 12% of one thread's
// samples, 6.6% of the other's, which waited), and threads beyond NKV get none at all (Llama 3's 8
// kv heads on 16 cores). Three phases, each dealt evenly, with the barriers of the omp for's
// between them: every query's scores against key blocks (row, kv head, kSplitKeys keys); every
// query row's softmax; the weighted values by (row, kv head, pair of 8-float output chunks). Each
// score is one_score's (group_scores from the block's first key: reduce4 gives a score the same
// bits in whichever slot of a key pair it falls), each softmax softmax_visible_row's over the
// whole row, and each output lane one chain over the keys in order: the bits of task_queries,
// whichever path and thread compute them. Called by every thread of a parallel region (its omp
// for's bind to it); scores: (B, T, NH) rows of score_stride(s) floats, shared.
constexpr int64_t kSplitKeys = 64;
// Below this many keys (the call's last query's) the unsplit path: there what the balance saves is
// about what the split's two extra barriers per call cost. One decode step's attention, SmolLM2's
// heads over a half cache (`bench_attention --decode 1`, Zen 3, 2 threads, split against unsplit,
// alternating, medians of 5 rounds): 0.89x and 1.08x at 512 keys (two runs: noise), 1.13x at 640,
// 1.19x at 768, 1.46x at 1024, 1.49x at 2000, 1.44x at 4000.
constexpr int64_t kSplitMinKeys = 512;

// group_scores / group_weighted_values (Step 0: heads at one position) with G a run-time count.
template <int C, typename E>
void heads_scores(int G, float* const rows[kGroup], const float* qv, const E* kb, int64_t kv_stride,
                  int64_t n, float scale) {
  switch (G) {
    case 1:
      return group_scores<C, 1, 0>(rows, qv, 8 * C, kb, kv_stride, n, scale);
    case 2:
      return group_scores<C, 2, 0>(rows, qv, 8 * C, kb, kv_stride, n, scale);
    case 3:
      return group_scores<C, 3, 0>(rows, qv, 8 * C, kb, kv_stride, n, scale);
    default:
      return group_scores<C, 4, 0>(rows, qv, 8 * C, kb, kv_stride, n, scale);
  }
}
template <int C, typename E>
void heads_values(int G, float* o, const float* const p[kGroup], const ValueRows<E>& vr, int64_t n,
                  int c_begin, int c_end) {
  switch (G) {
    case 1:
      return group_weighted_values<C, 1, 0>(o, 8 * C, p, vr, n, c_begin, c_end);
    case 2:
      return group_weighted_values<C, 2, 0>(o, 8 * C, p, vr, n, c_begin, c_end);
    case 3:
      return group_weighted_values<C, 3, 0>(o, 8 * C, p, vr, n, c_begin, c_end);
    default:
      return group_weighted_values<C, 4, 0>(o, 8 * C, p, vr, n, c_begin, c_end);
  }
}

template <int C, typename E>
void decode_split(float* out, const float* q, const E* k, const E* v, const uint8_t* key_valid,
                  const AttentionShape& s, float* scores) {
  const int64_t group = s.NH / s.NKV, kv_stride = s.NKV * s.HD, stride = score_stride(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t key_blocks = (s.past + s.T + kSplitKeys - 1) / kSplitKeys;
  constexpr int64_t kPairs = C / 2;
  const auto row_of = [&](int64_t b, int64_t t, int64_t h) {
    return scores + ((b * s.T + t) * s.NH + h) * stride;
  };
  // Query (b, t) sees keys [0, past + t + 1); a kv head's query heads go kGroup at a time.
  const auto each_head_group = [&](int64_t g, auto&& fn) {
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = g * group; h < (g + 1) * group; h += kGroup)
        fn(t, h, static_cast<int>(std::min<int64_t>(kGroup, (g + 1) * group - h)));
  };
#pragma omp for schedule(static)
  for (int64_t item = 0; item < s.B * s.NKV * key_blocks; ++item) {
    const int64_t b = item / (s.NKV * key_blocks), g = item / key_blocks % s.NKV;
    const int64_t j0 = item % key_blocks * kSplitKeys;
    const E* kb = k + b * s.Smax * kv_stride + g * s.HD + j0 * kv_stride;
    each_head_group(g, [&](int64_t t, int64_t h, int G) {
      const int64_t j1 = std::min(s.past + t + 1, j0 + kSplitKeys);
      if (j1 <= j0) return;
      float* rows[kGroup];
      for (int i = 0; i < G; ++i) rows[i] = row_of(b, t, h + i) + j0;
      heads_scores<C>(G, rows, q + ((b * s.T + t) * s.NH + h) * s.HD, kb, kv_stride, j1 - j0,
                      scale);
    });
  }
#pragma omp for schedule(static)
  for (int64_t r = 0; r < s.B * s.T * s.NH; ++r) {
    const int64_t b = r / (s.T * s.NH), p = s.past + r / s.NH % s.T;
    detail::softmax_visible_row(scores + r * stride, p + 1, p + 1, key_valid, b, s.Smax, 0, p);
  }
#pragma omp for schedule(static)
  for (int64_t item = 0; item < s.B * s.NKV * kPairs; ++item) {
    const int64_t b = item / (s.NKV * kPairs), g = item / kPairs % s.NKV;
    const int c0 = static_cast<int>(2 * (item % kPairs));
    const ValueRows<E> vr{v + b * s.Smax * kv_stride + g * s.HD, 16, kv_stride};
    each_head_group(g, [&](int64_t t, int64_t h, int G) {
      const float* p[kGroup];
      for (int i = 0; i < G; ++i) p[i] = row_of(b, t, h + i);
      heads_values<C>(G, out + ((b * s.T + t) * s.NH + h) * s.HD, p, vr, s.past + t + 1, c0,
                      c0 + 2);
    });
  }
}

// The per-query kernel (the decode path, and every call of attention_forward_fixed_order), no
// packing, head_dim 8 * C: per (row, head) and query, the scores against each key it may see,
// softmax, then the weighted sum of the value rows, key by key. No BLAS call. A query's
// operations depend on its position, its q and the keys only: never on T, past, B or the queries
// beside it in the call (a group of four or alone, the same bits: test_ops FixedOrderAttention),
// nor on whether its keys and values were read from the cache or from a task's copy of them, nor
// on whether a half cache's elements were widened as read or when copied.
template <int C, typename E>
void attention_forward_per_query(float* out, const float* q, const E* k, const E* v,
                                 const uint8_t* key_valid, const AttentionShape& s) {
  const int64_t group = s.NH / s.NKV;
  const int64_t kv_stride = s.NKV * s.HD, n_max = s.past + s.T;
  const int64_t chunks = (s.T + kPerQueryChunk - 1) / kPerQueryChunk;
  // Decode steps (a few queries) read the cache in place: a copy would cost more than their one
  // pass over it. Longer calls copy each task's keys and values once for its heads and queries.
  const bool gather = s.T > kDecodeMaxQueries;
  // Tasks are (row, kv head, chunk of queries): a kv head's query heads go together, so that
  // they share the loads of its keys and values (heads_query; the groups of four queries too).
  const int64_t tasks = s.B * s.NKV * chunks;
  const bool transposed = gather && detail::keys16_available();
  // A decode step long enough for decode_split; it takes it where its tasks do not divide among
  // the team's threads (known in the region). Its shared scores, (B, T, NH, score_stride), are in
  // the calling thread's scratch, named through a pointer: in the region, split_scores would name
  // each thread's own.
  const bool may_split = !gather && n_max >= kSplitMinKeys;
  thread_local std::vector<float> split_scores;
  const auto split_floats = static_cast<size_t>(s.B * s.T * s.NH * score_stride(s));
  if (may_split && split_scores.size() < split_floats) split_scores.resize(split_floats);
  float* const shared_scores = split_scores.data();
#pragma omp parallel
  {
    // Every thread of the team takes the same branch (the team's size is the same for all).
    if (may_split && tasks % omp_get_num_threads() != 0) {
      decode_split<C>(out, q, k, v, key_valid, s, shared_scores);
    } else {
      std::vector<float> scores(static_cast<size_t>(kGroup * score_stride(s)));  // (kGroup, stride)
      std::vector<float> kc, vc;  // gather: (n, HD) each, the keys rounded up to a block of 16
      // The (row, kv head) whose keys and values this thread's copies hold, and how many of them.
      int64_t held_b = -1, held_g = -1, held_n = 0;
      if (gather) {
        kc.resize(static_cast<size_t>(score_stride(s) * s.HD));
        vc.resize(static_cast<size_t>(n_max * s.HD));
      }
      const auto run = [&](int64_t b, int64_t g, int64_t chunk) {
        const int64_t t0 = chunk * kPerQueryChunk, t1 = std::min(s.T, t0 + kPerQueryChunk);
        // Key j's row at kb + j * kv_stride; value rows per vr.
        const E* kb = k + b * s.Smax * kv_stride + g * s.HD;
        const ValueRows<E> vr{v + b * s.Smax * kv_stride + g * s.HD, 16, kv_stride};
        if (!gather) {
          task_queries<C>(out, q, KeyRows<E>{kb, kv_stride}, vr, scores.data(), b, g * group,
                          (g + 1) * group, t0, t1, key_valid, s);
          return;
        }
        const int64_t n = s.past + t1;  // the keys the task's last query sees
        if (b != held_b || g != held_g || n > held_n) {
          gather_head<C>(kc.data(), vc.data(), kb, vr.base, kv_stride, n, transposed);
          held_b = b, held_g = g, held_n = n;
        }
        const KeyRows<float> keys{kc.data(), s.HD, transposed ? kc.data() : nullptr};
        task_queries<C>(out, q, keys, ValueRows<float>{vc.data(), 16 * held_n, 16}, scores.data(),
                        b, g * group, (g + 1) * group, t0, t1, key_valid, s);
      };
      if (gather) {
        // A causal chunk's cost grows with its index: the chunks of each (row, kv head) go largest
        // first, dealt one at a time to whichever thread is free (each thread's last chunk is then
        // a small one), and a thread's later, smaller chunks of the same head find its keys and
        // values in its copies already. Which thread computes a query never changes its bits.
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; ++task)
          run(task / (s.NKV * chunks), task / chunks % s.NKV, chunks - 1 - task % chunks);
      } else {
        // Decode: in contiguous blocks, so that the query heads of one key/value head run on one
        // thread and read its keys and values from memory once (dealt one by one, each thread read
        // every head's: 2x the bytes of the step's largest read after the weights).
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; ++task)
          run(task / (s.NKV * chunks), task / chunks % s.NKV, task % chunks);
      }
    }
  }
}

// The per-query kernel for this head_dim; false where it has none (head_dim not a multiple of 8
// or above 256).
template <typename E>
bool per_query(float* out, const float* q, const E* k, const E* v, const uint8_t* key_valid,
               const AttentionShape& s) {
  switch (s.HD) {
    case 32: attention_forward_per_query<4>(out, q, k, v, key_valid, s); return true;
    case 64: attention_forward_per_query<8>(out, q, k, v, key_valid, s); return true;
    case 80: attention_forward_per_query<10>(out, q, k, v, key_valid, s); return true;
    case 96: attention_forward_per_query<12>(out, q, k, v, key_valid, s); return true;
    case 128: attention_forward_per_query<16>(out, q, k, v, key_valid, s); return true;
    case 256: attention_forward_per_query<32>(out, q, k, v, key_valid, s); return true;
    default: return false;
  }
}

}  // namespace

void attention_forward(float* out, const float* q, const float* k, const float* v,
                       const uint8_t* key_valid, const int64_t* seg_start, const AttentionShape& s) {
  detail::check_segments(seg_start, s, "attention_forward");
  if (seg_start == nullptr && s.T <= kDecodeMaxQueries && per_query(out, q, k, v, key_valid, s)) return;
  const int64_t group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const int64_t q_stride = s.NH * s.HD, kv_stride = s.NKV * s.HD;
  const int64_t tasks = s.B * s.NH;
  const int64_t M = detail::longest_segment(seg_start, s.B, s.T);  // T without packing
  const int64_t tile = std::min(M, detail::kQueryTile);
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(tile * (s.past + M)));  // (tile, n) of the largest block
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.NH, h = task % s.NH, g = h / group;
      // Block: queries [r0, r1) (absolute positions past + t) against keys [k0, past + r1): the
      // whole row without packing (k0 = 0), one example with it (k0 = r0, past = 0).
      for (int64_t r0 = 0; r0 < s.T;) {
        const int64_t r1 = detail::segment_end(seg_start, b, s.T, r0);
        const int64_t k0 = seg_start == nullptr ? 0 : r0;
        const float* kb = k + (b * s.Smax + k0) * kv_stride + g * s.HD;
        const float* vb = v + (b * s.Smax + k0) * kv_stride + g * s.HD;
        // Query tiles [i0, i1) of the block see keys [k0, past + i1) only (causal): the scores
        // right of the diagonal are never computed.
        for (int64_t i0 = r0; i0 < r1; i0 += tile) {
          const int64_t i1 = std::min(r1, i0 + tile), m = i1 - i0, n = s.past + i1 - k0;
          const float* qb = q + (b * s.T + i0) * q_stride + h * s.HD;
          float* ob = out + (b * s.T + i0) * q_stride + h * s.HD;
          // scores (m, n) = scale * Q (m, HD) . K^T (HD, n)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                      static_cast<int>(s.HD), scale, qb, static_cast<int>(q_stride), kb,
                      static_cast<int>(kv_stride), 0.0f, scores.data(), static_cast<int>(n));
          for (int64_t i = 0; i < m; ++i) {
            const int64_t p = s.past + i0 + i;  // absolute query position; keys k0 + c <= p
            detail::softmax_visible_row(scores.data() + i * n, n, p - k0 + 1, key_valid, b, s.Smax, k0, p);
          }
          // out (m, HD) = P (m, n) . V (n, HD)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                      static_cast<int>(s.HD), static_cast<int>(n), 1.0f, scores.data(),
                      static_cast<int>(n), vb, static_cast<int>(kv_stride), 0.0f, ob,
                      static_cast<int>(q_stride));
        }
        r0 = r1;
      }
    }
  }
}

void attention_forward_fixed_order(float* out, const float* q, const float* k, const float* v,
                                   const uint8_t* key_valid, const AttentionShape& s) {
  // ref's double loop is per query too, for a head_dim without a kernel.
  if (!per_query(out, q, k, v, key_valid, s)) ref::attention_forward(out, q, k, v, key_valid, nullptr, s);
}

void attention_forward_fixed_order(float* out, const float* q, const uint16_t* k, const uint16_t* v,
                                   const uint8_t* key_valid, const AttentionShape& s) {
  if (per_query(out, q, k, v, key_valid, s)) return;
  // A head_dim without a kernel: ref on the keys and values widened (the positions each row has
  // filled; the rest is never read).
  const int64_t kv_stride = s.NKV * s.HD, n = (s.past + s.T) * kv_stride;
  std::vector<float> kf(static_cast<size_t>(s.B * s.Smax * kv_stride)), vf(kf.size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = b * s.Smax * kv_stride; i < b * s.Smax * kv_stride + n; ++i) {
      kf[static_cast<size_t>(i)] = f16_to_f32(k[i]);
      vf[static_cast<size_t>(i)] = f16_to_f32(v[i]);
    }
  ref::attention_forward(out, q, kf.data(), vf.data(), key_valid, nullptr, s);
}

const char* fixed_order_attention_kernel() {
  return detail::keys16_available()
             ? "prompts: avx512vnni scores against transposed keys; decode: avx2 loops over the "
               "cache's rows (the same bits)"
             : "avx2 loops over the keys' rows";
}

void store_rows_f16(uint16_t* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                    int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* d = dst + r * dst_stride;
    const float* x = src + r * src_stride;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m128i h =
          _mm256_cvtps_ph(_mm256_loadu_ps(x + c), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + c), h);
    }
    for (; c < cols; ++c) d[c] = f32_to_f16(x[c]);
  }
}

}  // namespace medtune::ops
