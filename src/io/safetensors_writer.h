// safetensors writer: produces the same bytes as the reference library (Rust `safetensors`, used
// by Python's safetensors.torch.save_file) for the same tensors and at most one metadata entry,
// and writes them crash-safely (io/atomic_file.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace medtune::io {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;     // F32, F16, BF16, F64, I64 or I32 (safetensors has no ggml blocks)
  std::vector<int64_t> shape;   // PyTorch order; {} is a scalar (one element)
  const void* data = nullptr;   // numel x element size bytes, little-endian, row-major
};

// Serialises to bytes (8-byte LE header length, JSON header padded with spaces to a multiple of 8,
// tensor data). Layout as the reference: tensors sorted by descending dtype alignment
// (I64, F64, F32, I32, BF16, F16), then by name; offsets contiguous from 0; compact JSON with
// "__metadata__" first. `metadata` is omitted from the header when empty. The reference keeps
// metadata in a Rust HashMap, so with two or more entries its key order is random; ours is sorted.
// Throws Internal for a caller bug (duplicate or empty name, "__metadata__" as a name, quantized
// dtype, negative dimension, null data for a non-empty tensor).
std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata);

// serialize_safetensors + atomic_write_file(path, ...), without copying tensor data into a
// second buffer.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace medtune::io
