// GGUF v3 writer: the file llama.cpp (gguf.c) and gguf-py's GGUFWriter produce, written
// crash-safely (io/atomic_file.h). Metadata values reuse the reader's GgufValue, so a value read
// from one file is written back with its original type (u32 stays u32, bool arrays stay bool).
//
// Layout (same as gguf-py): header | metadata in the caller's order | tensor infos in the
// caller's order | zero padding to `alignment` | each tensor's data, padded with zeros to the
// next multiple of `alignment` (the last one too). Offsets are relative to the data section.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"

namespace medtune::io {

struct GgufTensorToWrite {
  std::string name;            // "blk.0.attn_q.weight"
  DType dtype = DType::F32;    // F32, F16, BF16, a ggml block type (not NF4), I32, I64, F64
  std::vector<int64_t> shape;  // PyTorch order (outermost first); written reversed as ggml's ne[]
  const void* data = nullptr;  // dtype_row_bytes(dtype, numel) bytes, rows of shape.back() elements
};

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// Typed constructors for metadata values (the GGUF type is explicit, as llama.cpp checks it).
GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_string_array(std::vector<std::string> v);
GgufValue gguf_i32_array(std::vector<int64_t> v);   // each must fit in i32
GgufValue gguf_f32_array(std::vector<double> v);

// Bytes of everything before the data section, padded to `alignment`, plus the byte offset of each
// tensor within the data section. Throws Internal on a caller bug: duplicate/empty names or keys, a
// last dimension that is not a multiple of the block size, an alignment that is not a power of
// two, a value whose variant does not match its declared type, "general.alignment" disagreeing
// with `alignment`.
struct GgufLayout {
  std::vector<uint8_t> head;
  std::vector<uint64_t> offsets;  // per tensor, relative to the data section
  std::vector<uint64_t> nbytes;   // per tensor, unpadded
  uint64_t data_bytes = 0;        // data section size including padding
};
GgufLayout plan_gguf(const GgufMetadata& metadata, const std::vector<GgufTensorToWrite>& tensors,
                     uint64_t alignment = 32);

// The whole file as bytes (for tests and small files).
std::vector<uint8_t> serialize_gguf(const GgufMetadata& metadata,
                                    const std::vector<GgufTensorToWrite>& tensors,
                                    uint64_t alignment = 32);

// plan_gguf + atomic_write_file, gathering the tensors' bytes in place (no second copy).
void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorToWrite>& tensors, uint64_t alignment = 32);

}  // namespace medtune::io
