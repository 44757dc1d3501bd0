// Internal to ops/cpu/attention.cpp: the fixed-order attention's scores against keys stored
// transposed, 16 keys to a block, on AVX-512 (attention_keys16_avx512vnni.cpp, compiled with
// that path's flags and called only when active_isa() has it, cmake/isa_kernels.cmake).
//
// attention.cpp's per-query kernel computes a score as 8 lanes of a query's dimensions (lane l
// accumulates dimensions d = l mod 8 in order, one FMA each), then one tree over the lanes,
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then times the scale: its horizontal adds
// were a fifth of the attention's time on a prompt. Here each of 16 vector lanes is one key and
// the 8 lane sums are 8 registers: the same FMAs and the same tree on the same values, done
// vertically, so every score has one_score's bits (test_ops FixedOrderAttention).
#pragma once

#include <cstdint>

namespace medtune::ops::detail {

constexpr int64_t kKeyBlock = 16;  // keys per transposed block: one AVX-512 register of fp32

// Whether this process takes the kernels below (AVX-512: active_isa() >= avx512vnni).
bool keys16_available();

// Keys [0, n) of one head into kt (their rows at kb + j * kv_stride, HD elements each, fp32 or
// IEEE half widened exactly): block jb = j / 16 holds element d of its keys at
// kt[(jb * HD + d) * 16 + j % 16]; keys from n to the end of n's block are zeros. HD is a
// multiple of 8; kt holds n rounded up to 16 times HD floats.
void transpose_keys16(float* kt, const float* kb, int64_t kv_stride, int64_t n, int64_t HD);
void transpose_keys16(float* kt, const uint16_t* kb, int64_t kv_stride, int64_t n, int64_t HD);

// scores[i][j] = scale * (q_i . K_j) for queries i < G (1 <= G <= 4; q_i at q + i * q_stride) and
// keys j < n rounded up to 16 (the keys past n score against zeros: written, never meant to be
// read), K in kt as transpose_keys16 writes it.
void scores_keys16(float* const* scores, int G, const float* q, int64_t q_stride, const float* kt,
                   int64_t n, int64_t HD, float scale);

// The weighted values of G <= 4 queries on 512-bit registers: o_i (at o + i * o_stride, HD
// floats) = sum over query i's keys j of p[i][j] * V_j, keys [0, n0) then query i's own keys
// [n0, n0 + step * i) (step 1: consecutive queries; 0: heads at one position). V in a task's
// copy, 16 floats (a chunk pair) per key and plane: element 16 * c2 + e of key j at
// vt[c2 * plane + 16 * j + e]; HD a multiple of 16. attention.cpp's group_weighted_values does
// the same on 256-bit registers: each output element is one FMA chain over the keys in the same
// order in both, so the two give the same bits (a vector lane's chain never depends on the
// vector's width).
void weighted_values16(float* o, int64_t o_stride, const float* const* p, int G, int step,
                       const float* vt, int64_t plane, int64_t n0, int64_t HD);

// row[0, n) = softmax(row) for a query that may see keys [0, n) (n >= 1), valid (n bytes, or
// null: every key) hiding those where it is 0: softmax_visible_row's bits (attention_mask.h,
// every key causally visible) on 512-bit registers. vec_exp.h's exp8 on 16 lanes (the same
// operations on each lane), and its sum in the same order: 8 lane sums over the row's 8-float
// chunks in order (a 16-float chunk adds its two halves in turn), the lanes added one by one,
// then the tail's elements one by one.
void softmax_row16(float* row, int64_t n, const uint8_t* valid);

}  // namespace medtune::ops::detail
