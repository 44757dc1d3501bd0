// bf16 x bf16 -> fp32 matrix products through oneDNN (the `precision: bf16` GEMMs of
// ops/cpu/linear_bf16.cpp). The only file that knows oneDNN: it picks AVX512-BF16 or AMX kernels
// by itself from the CPU it runs on.
#pragma once

#include <cstdint>
#include <string>

namespace medtune::ops::onednn {

// Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX-BF16) and MEDTUNE_ISA allows
// AVX-512 (core/cpu_features.h). oneDNN would also run bf16 on an older CPU by widening it in
// software; there the widened SGEMM of linear_bf16.cpp is as fast and needs no JIT.
bool bf16_native();

// C (M, N) = A (M, K) . B, or C += A . B with `accumulate`; C row-major with row stride ldc; A
// row-major (M, K) with row stride lda, or, with a_rows_are_k, given as its transpose: K rows of M
// elements with row stride lda (attention's Pᵀ·dO); B either row-major (K, N) with row stride ldb,
// or, with b_rows_are_n, given as its transpose: N rows of K elements with row stride ldb (a
// weight matrix (out, in) as stored).
// Products of two bf16 values are exact in fp32 and every sum is an fp32 add (oneDNN accumulates
// in fp32); only the order of the sums is oneDNN's. Thread-safe: each calling thread keeps its own
// primitives and scratchpad. Internal error when oneDNN fails (or bf16_native() is false).
void matmul_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                 int64_t ldb, bool b_rows_are_n, float* C, int64_t ldc, bool accumulate,
                 bool a_rows_are_k = false);

// oneDNN's name of the kernel it chose for a representative shape, e.g. "brg:avx512_core_bf16",
// with the library's version: for doctor and reports. "" when bf16_native() is false.
std::string kernel_name();

}  // namespace medtune::ops::onednn
