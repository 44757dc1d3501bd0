#include "io/gguf_writer.h"

#include <cstring>
#include <set>
#include <span>

#include "core/error.h"
#include "io/atomic_file.h"

namespace medtune::io {

namespace {

using VT = GgufValue::Type;
constexpr uint32_t kVersion = 3;

// ggml type ids (ggml.h, enum ggml_type) of the dtypes we write.
uint32_t ggml_type_id(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q5_0: return 6;
    case DType::Q5_1: return 7;
    case DType::Q8_0: return 8;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;
    case DType::IQ4_NL: return 20;
    case DType::IQ4_XS: return 23;
    case DType::Q4_K: return 12;
    case DType::Q5_K: return 13;
    case DType::Q6_K: return 14;
    case DType::I32: return 26;
    case DType::I64: return 27;
    case DType::F64: return 28;
    case DType::BF16: return 30;
    case DType::NF4: break;  // medtune's in-memory bitsandbytes form: no ggml type
  }
  throw Internal("gguf writer: dtype without a ggml type id");
}

class Bytes {
 public:
  std::vector<uint8_t> buf;
  template <typename T>
  void put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
};

[[noreturn]] void mismatch(const std::string& key) {
  throw Internal("gguf writer: metadata key '" + key + "': value does not match its declared type");
}

template <typename T>
const T& alt(const GgufValue& v, const std::string& key) {
  const T* p = std::get_if<T>(&v.value);
  if (!p) mismatch(key);
  return *p;
}

// One scalar (or array element) of integer/float/bool type t from a widened number.
void put_number(Bytes& b, VT t, uint64_t u, int64_t i, double d, const std::string& key) {
  switch (t) {
    case VT::U8: b.put<uint8_t>(static_cast<uint8_t>(u)); return;
    case VT::U16: b.put<uint16_t>(static_cast<uint16_t>(u)); return;
    case VT::U32: b.put<uint32_t>(static_cast<uint32_t>(u)); return;
    case VT::U64: b.put<uint64_t>(u); return;
    case VT::I8: b.put<int8_t>(static_cast<int8_t>(i)); return;
    case VT::I16: b.put<int16_t>(static_cast<int16_t>(i)); return;
    case VT::I32: b.put<int32_t>(static_cast<int32_t>(i)); return;
    case VT::I64: b.put<int64_t>(i); return;
    case VT::BOOL: b.put<uint8_t>(i != 0 ? 1 : 0); return;
    case VT::F32: b.put<float>(static_cast<float>(d)); return;
    case VT::F64: b.put<double>(d); return;
    default: mismatch(key);
  }
}

bool is_unsigned(VT t) { return t == VT::U8 || t == VT::U16 || t == VT::U32 || t == VT::U64; }
bool is_signed(VT t) { return t == VT::I8 || t == VT::I16 || t == VT::I32 || t == VT::I64; }
bool is_float(VT t) { return t == VT::F32 || t == VT::F64; }

void put_value(Bytes& b, const std::string& key, const GgufValue& v) {
  b.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type == VT::STRING) {
    b.put_string(alt<std::string>(v, key));
  } else if (v.type == VT::BOOL) {
    b.put<uint8_t>(alt<bool>(v, key) ? 1 : 0);
  } else if (is_unsigned(v.type)) {
    put_number(b, v.type, alt<uint64_t>(v, key), 0, 0.0, key);
  } else if (is_signed(v.type)) {
    put_number(b, v.type, 0, alt<int64_t>(v, key), 0.0, key);
  } else if (is_float(v.type)) {
    put_number(b, v.type, 0, 0, alt<double>(v, key), key);
  } else if (v.type == VT::ARRAY) {
    b.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
    if (v.elem_type == VT::STRING) {
      const auto& a = alt<std::vector<std::string>>(v, key);
      b.put<uint64_t>(a.size());
      for (const std::string& s : a) b.put_string(s);
    } else if (is_float(v.elem_type)) {
      const auto& a = alt<std::vector<double>>(v, key);
      b.put<uint64_t>(a.size());
      for (double d : a) put_number(b, v.elem_type, 0, 0, d, key);
    } else if (is_unsigned(v.elem_type) || is_signed(v.elem_type) || v.elem_type == VT::BOOL) {
      // The reader widens every integer array (and bool arrays) into int64.
      const auto& a = alt<std::vector<int64_t>>(v, key);
      b.put<uint64_t>(a.size());
      for (int64_t i : a) put_number(b, v.elem_type, static_cast<uint64_t>(i), i, 0.0, key);
    } else {
      mismatch(key);  // arrays of arrays: not used by llama.cpp's keys
    }
  } else {
    mismatch(key);
  }
}

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

GgufValue gguf_u32(uint32_t v) { return {VT::U32, VT::U32, uint64_t{v}}; }
GgufValue gguf_i32(int32_t v) { return {VT::I32, VT::U32, int64_t{v}}; }
GgufValue gguf_u64(uint64_t v) { return {VT::U64, VT::U32, v}; }
GgufValue gguf_f32(float v) { return {VT::F32, VT::U32, static_cast<double>(v)}; }
GgufValue gguf_bool(bool v) { return {VT::BOOL, VT::U32, v}; }
GgufValue gguf_string(std::string v) { return {VT::STRING, VT::U32, std::move(v)}; }
GgufValue gguf_string_array(std::vector<std::string> v) { return {VT::ARRAY, VT::STRING, std::move(v)}; }
GgufValue gguf_i32_array(std::vector<int64_t> v) {
  for (int64_t i : v)
    if (i < INT32_MIN || i > INT32_MAX) throw Internal("gguf_i32_array: value out of i32 range");
  return {VT::ARRAY, VT::I32, std::move(v)};
}
GgufValue gguf_f32_array(std::vector<double> v) { return {VT::ARRAY, VT::F32, std::move(v)}; }

GgufLayout plan_gguf(const GgufMetadata& metadata, const std::vector<GgufTensorToWrite>& tensors,
                     uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Internal("gguf writer: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  Bytes b;
  b.buf = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(kVersion);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(metadata.size());
  std::set<std::string> keys;
  for (const auto& [key, value] : metadata) {
    if (key.empty() || !keys.insert(key).second) {
      throw Internal("gguf writer: metadata key '" + key + "' is empty or given twice");
    }
    if (key == "general.alignment") {
      const uint64_t* a = std::get_if<uint64_t>(&value.value);
      if (!a || *a != alignment) {
        throw Internal("gguf writer: 'general.alignment' disagrees with the alignment " +
                       std::to_string(alignment));
      }
    }
    b.put_string(key);
    put_value(b, key, value);
  }
  GgufLayout out;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    if (t.name.empty() || !names.insert(t.name).second) {
      throw Internal("gguf writer: tensor name '" + t.name + "' is empty or given twice");
    }
    if (t.shape.empty()) throw Internal("gguf writer: tensor '" + t.name + "' has no dimensions");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d <= 0) throw Internal("gguf writer: tensor '" + t.name + "' has a dimension <= 0");
      numel *= d;
    }
    if (t.shape.back() % dtype_block_elems(t.dtype) != 0) {
      throw Internal("gguf writer: tensor '" + t.name + "': rows of " + std::to_string(t.shape.back()) +
                     " elements are not whole " + std::string(dtype_name(t.dtype)) + " blocks");
    }
    if (!t.data) throw Internal("gguf writer: tensor '" + t.name + "' has no data");
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) b.put<uint64_t>(static_cast<uint64_t>(*it));
    b.put<uint32_t>(ggml_type_id(t.dtype));
    b.put<uint64_t>(offset);
    const uint64_t n = static_cast<uint64_t>(dtype_row_bytes(t.dtype, numel));
    out.offsets.push_back(offset);
    out.nbytes.push_back(n);
    offset = round_up(offset + n, alignment);
  }
  b.buf.resize(round_up(b.buf.size(), alignment), 0);
  out.head = std::move(b.buf);
  out.data_bytes = offset;
  return out;
}

std::vector<uint8_t> serialize_gguf(const GgufMetadata& metadata,
                                    const std::vector<GgufTensorToWrite>& tensors,
                                    uint64_t alignment) {
  const GgufLayout l = plan_gguf(metadata, tensors, alignment);
  std::vector<uint8_t> out = l.head;
  const size_t data_start = out.size();
  out.resize(data_start + l.data_bytes, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy(out.data() + data_start + l.offsets[i], tensors[i].data, l.nbytes[i]);
  }
  return out;
}

void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorToWrite>& tensors, uint64_t alignment) {
  const GgufLayout l = plan_gguf(metadata, tensors, alignment);
  static const std::vector<uint8_t> zeros(4096, 0);
  if (alignment > zeros.size()) throw Internal("gguf writer: alignment above 4096");
  std::vector<std::span<const uint8_t>> pieces;
  pieces.emplace_back(l.head);
  uint64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (l.offsets[i] > at) pieces.emplace_back(zeros.data(), l.offsets[i] - at);
    pieces.emplace_back(static_cast<const uint8_t*>(tensors[i].data), l.nbytes[i]);
    at = l.offsets[i] + l.nbytes[i];
  }
  if (l.data_bytes > at) pieces.emplace_back(zeros.data(), l.data_bytes - at);
  atomic_write_file(path, pieces);
}

}  // namespace medtune::io
