// NF4 (4-bit NormalFloat) exactly as bitsandbytes stores it (QLoRA's base-weight format).
//
// bitsandbytes' layout, over the tensor flattened row-major:
//   - blocks of 64 elements, one fp32 absmax each (the last block may be short);
//   - each element is the index (0..15) of the nearest of 16 NF4 values (kCode) to x / absmax,
//     two indices per byte, the first element in the HIGH nibble;
//   - optional double quantization ("compress_statistics"): the absmax vector minus its mean
//     (offset) is itself quantized to 8-bit codes of the signed dynamic map, in blocks of 256,
//     each with an fp32 absmax2.
// Dequantization: x = kCode[q] * absmax[block], where a nested absmax is
// dynamic_map[qabsmax] * absmax2[block / 256] + offset, each step rounded to fp32.
//
// Every function here reproduces bitsandbytes 0.50.2's CPU path bit for bit (fixtures:
// tools/make_nf4_fixtures.py, tests/unit/core/test_nf4.cpp); the comments say which bnb code
// each mirrors and where its rounding decisions come from.
//
// medtune's own in-memory form for matmuls is DType::NF4 (see row_blocks below): per block of
// 64, the resolved fp32 absmax followed by the 32 packed bytes, so that a weight row is a
// sequence of self-contained blocks like the ggml types and can be dequantized panel by panel.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace medtune::nf4 {

constexpr int64_t kBlock = 64;         // elements per absmax (bnb blocksize=64, QLoRA's default)
constexpr int64_t kNestedBlock = 256;  // absmax values per absmax2 (bnb's double quantization)
constexpr int64_t kRowBlockBytes = 4 + kBlock / 2;  // DType::NF4 block: f32 absmax | 32 bytes

// bnb's NF4 values (bitsandbytes.functional.get_4bit_type("nf4")), ascending, index = code.
extern const std::array<float, 16> kCode;
// bnb's create_dynamic_map(signed=True): 256 ascending values, the code of double quantization.
const std::array<float, 256>& dynamic_map();

// bitsandbytes.functional.quantize_4bit(x, blocksize=64, quant_type="nf4") on the CPU.
// packed: (n + 1) / 2 bytes; absmax: ceil(n / 64) values.
void quantize(const float* x, int64_t n, uint8_t* packed, float* absmax);

// Double quantization of an absmax vector (compress_statistics=True).
struct NestedAbsmax {
  std::vector<uint8_t> q;        // (nblocks): dynamic-map codes of absmax - offset
  std::vector<float> absmax2;    // (ceil(nblocks / 256))
  float offset = 0.0f;           // torch.mean(absmax) as torch computes it on the CPU
};
NestedAbsmax quantize_absmax(const float* absmax, int64_t nblocks);
// absmax[b] = fp32(fp32(dynamic_map[q[b]] * absmax2[b / 256]) + offset): bnb's dequantize.
void dequantize_absmax(const NestedAbsmax& s, float* absmax);
void dequantize_absmax(const uint8_t* q, const float* absmax2, float offset, int64_t nblocks,
                       float* absmax);
// The same with the code and block size a checkpoint stores (nested_quant_map, nested_blocksize).
void dequantize_absmax(const uint8_t* q, const float* absmax2, float offset, int64_t nblocks,
                       const float* code256, int64_t nested_blocksize, float* absmax);

// bnb's CPU quantize_blockwise (8-bit, code = 256 ascending values in [-1, 1]).
void quantize_blockwise_8bit(const float* x, int64_t n, int64_t blocksize,
                             const std::array<float, 256>& code, uint8_t* q, float* absmax);

// torch.mean of an fp32 vector on an AVX2 CPU, summed in torch's order (single-threaded; torch
// only splits a reduction across threads above 32768 elements, i.e. 2M weights per tensor).
float torch_mean(const float* x, int64_t n);

// out[i] = kCode[code of element i] * absmax[i / 64], i < n.
void dequantize(const uint8_t* packed, const float* absmax, float* out, int64_t n);
void dequantize_scalar(const uint8_t* packed, const float* absmax, float* out, int64_t n);

// DType::NF4 rows: (rows, cols) with cols % 64 == 0, from bnb's flat (packed, absmax) arrays.
// Returns rows * cols / 64 blocks of kRowBlockBytes.
std::vector<uint8_t> row_blocks(const uint8_t* packed, const float* absmax, int64_t rows,
                                int64_t cols);
// n elements (a multiple of 64) from DType::NF4 blocks; bit-identical to dequantize().
void dequantize_blocks(const uint8_t* blocks, float* out, int64_t n);
void dequantize_blocks_scalar(const uint8_t* blocks, float* out, int64_t n);
// dot(dequantize_blocks(blocks), x) without a temporary row (fp32 sums; order differs).
float dot_blocks(const uint8_t* blocks, const float* x, int64_t n);

bool has_simd();

}  // namespace medtune::nf4
