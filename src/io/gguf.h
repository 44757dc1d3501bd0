// GGUF v2/v3 reader (llama.cpp's model format): header, typed metadata, tensor infos, alignment.
// Tensors stay in the memory mapping; nothing is copied.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "core/raw_tensor.h"

namespace medtune::io {

// One metadata value. Arrays of strings and of numbers are what tokenizers use;
// every GGUF scalar type is widened to one of these alternatives (integers keep their sign).
struct GgufValue {
  enum class Type { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };
  Type type = Type::U32;      // the type stored in the file
  Type elem_type = Type::U32;  // for ARRAY: the element type
  std::variant<uint64_t, int64_t, double, bool, std::string,
               std::vector<std::string>, std::vector<int64_t>, std::vector<double>>
      value;
};

class GgufFile {
 public:
  // Parses header, metadata and tensor infos; validates every offset and size against the file.
  // Any malformed or truncated content throws BadInput naming the file and the key or tensor.
  static GgufFile open(const std::string& path);
  // Same, from bytes already in memory (used by the fuzzer); `name` is used in messages.
  static GgufFile parse(std::shared_ptr<MappedFile> file);

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // Tensors by GGUF name ("blk.0.attn_q.weight"), shapes reversed into PyTorch order.
  const std::map<std::string, RawTensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& tensor_order() const { return tensor_order_; }

  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Typed getters: throw BadInput "<file>: metadata key '<key>' ..." when missing or of another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;    // any integer type
  double get_float(const std::string& key) const;   // F32/F64 (and integers, widened)
  bool get_bool(const std::string& key) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // With defaults when the key is absent (still BadInput when present with a wrong type).
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, RawTensor> tensors_;
  std::vector<std::string> tensor_order_;
};

}  // namespace medtune::io
