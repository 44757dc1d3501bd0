// GGUF v2/v3 reader. Layout (all little-endian):
//
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to here)
//
// where string = u64 length + bytes and an ARRAY value = u32 elem_type + u64 count + elements.
// Every count and length is checked against the bytes left in the file before anything is
// allocated, so a hostile header cannot make us reserve gigabytes.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace medtune::io {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

using VT = GgufValue::Type;
constexpr uint32_t kNumValueTypes = 13;  // GGUF value types 0..12, in GgufValue::Type order
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;

const char* value_type_name(VT t) {
  switch (t) {
    case VT::U8: return "u8";
    case VT::I8: return "i8";
    case VT::U16: return "u16";
    case VT::I16: return "i16";
    case VT::U32: return "u32";
    case VT::I32: return "i32";
    case VT::F32: return "f32";
    case VT::BOOL: return "bool";
    case VT::STRING: return "string";
    case VT::ARRAY: return "array";
    case VT::U64: return "u64";
    case VT::I64: return "i64";
    case VT::F64: return "f64";
  }
  return "?";
}

// Bytes one element of a fixed-size type occupies; strings take at least their 8-byte length.
uint64_t min_value_bytes(VT t) {
  switch (t) {
    case VT::U8:
    case VT::I8:
    case VT::BOOL: return 1;
    case VT::U16:
    case VT::I16: return 2;
    case VT::U32:
    case VT::I32:
    case VT::F32: return 4;
    case VT::U64:
    case VT::I64:
    case VT::F64:
    case VT::STRING: return 8;
    case VT::ARRAY: return 12;  // elem_type + count
  }
  return 1;
}

bool is_signed_int(VT t) {
  return t == VT::I8 || t == VT::I16 || t == VT::I32 || t == VT::I64;
}
bool is_unsigned_int(VT t) {
  return t == VT::U8 || t == VT::U16 || t == VT::U32 || t == VT::U64;
}
bool is_int(VT t) {
  return is_signed_int(t) || is_unsigned_int(t);
}
bool is_float(VT t) {
  return t == VT::F32 || t == VT::F64;
}

// ggml type ids (ggml.h, enum ggml_type) we read, and the names of those we don't, for messages.
struct GgmlType {
  uint32_t id;
  const char* name;
  bool supported;
  DType dtype;
};
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", true, DType::F32},       {1, "F16", true, DType::F16},
    {2, "Q4_0", true, DType::Q4_0},     {3, "Q4_1", true, DType::Q4_1},
    {6, "Q5_0", true, DType::Q5_0},     {7, "Q5_1", true, DType::Q5_1},
    {8, "Q8_0", true, DType::Q8_0},     {9, "Q8_1", false, DType::F32},
    {10, "Q2_K", true, DType::Q2_K},    {11, "Q3_K", true, DType::Q3_K},
    {12, "Q4_K", true, DType::Q4_K},    {13, "Q5_K", true, DType::Q5_K},
    {14, "Q6_K", true, DType::Q6_K},    {15, "Q8_K", false, DType::F32},
    {16, "IQ2_XXS", false, DType::F32}, {17, "IQ2_XS", false, DType::F32},
    {18, "IQ3_XXS", false, DType::F32}, {19, "IQ1_S", false, DType::F32},
    {20, "IQ4_NL", true, DType::IQ4_NL},  {21, "IQ3_S", false, DType::F32},
    {22, "IQ2_S", false, DType::F32},   {23, "IQ4_XS", true, DType::IQ4_XS},
    {24, "I8", false, DType::F32},      {25, "I16", false, DType::F32},
    {26, "I32", false, DType::F32},     {27, "I64", false, DType::F32},
    {28, "F64", false, DType::F32},     {29, "IQ1_M", false, DType::F32},
    {30, "BF16", true, DType::BF16},    {34, "TQ1_0", false, DType::F32},
    {35, "TQ2_0", false, DType::F32},   {39, "MXFP4", false, DType::F32},
};

const GgmlType* find_ggml_type(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

// A cursor over the file's bytes. `what` describes what is being read, for messages.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void truncated(const std::string& what) const {
    throw BadInput(path_ + ": truncated at byte " + std::to_string(pos_) + " while reading " +
                   what + " (file is " + std::to_string(size_) + " bytes)");
  }

  template <typename T>
  T read(const std::string& what) {
    if (left() < sizeof(T)) truncated(what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // u64 length + bytes. The length is checked against the rest of the file before allocating.
  std::string read_string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + " (string length)");
    if (n > left()) {
      throw BadInput(path_ + ": " + what + ": string length " + std::to_string(n) + " at byte " +
                     std::to_string(pos_ - 8) + " runs past the end of the file (" +
                     std::to_string(left()) + " bytes left)");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

VT read_value_type(Reader& r, const std::string& path, const std::string& ctx, const char* role) {
  const uint64_t at = r.pos();
  const uint32_t t = r.read<uint32_t>(ctx + " (" + role + ")");
  if (t >= kNumValueTypes) {
    throw BadInput(path + ": " + ctx + ": unknown value type " + std::to_string(t) + " at byte " +
                   std::to_string(at) + " (GGUF types are 0..12)");
  }
  return static_cast<VT>(t);
}

// One scalar of type t, widened into the variant's alternative for it.
void read_scalar(Reader& r, VT t, GgufValue& out, const std::string& ctx) {
  const std::string what = ctx + " (" + value_type_name(t) + " value)";
  switch (t) {
    case VT::U8: out.value = static_cast<uint64_t>(r.read<uint8_t>(what)); break;
    case VT::U16: out.value = static_cast<uint64_t>(r.read<uint16_t>(what)); break;
    case VT::U32: out.value = static_cast<uint64_t>(r.read<uint32_t>(what)); break;
    case VT::U64: out.value = r.read<uint64_t>(what); break;
    case VT::I8: out.value = static_cast<int64_t>(r.read<int8_t>(what)); break;
    case VT::I16: out.value = static_cast<int64_t>(r.read<int16_t>(what)); break;
    case VT::I32: out.value = static_cast<int64_t>(r.read<int32_t>(what)); break;
    case VT::I64: out.value = r.read<int64_t>(what); break;
    case VT::F32: out.value = static_cast<double>(r.read<float>(what)); break;
    case VT::F64: out.value = r.read<double>(what); break;
    case VT::BOOL: out.value = r.read<uint8_t>(what) != 0; break;
    case VT::STRING: out.value = r.read_string(ctx); break;
    case VT::ARRAY: break;  // handled by the caller
  }
}

template <typename T, typename Wide>
void read_number_array(Reader& r, uint64_t count, std::vector<Wide>& out, const std::string& what) {
  out.reserve(static_cast<size_t>(count));  // count * sizeof(T) <= bytes left: checked by caller
  for (uint64_t i = 0; i < count; ++i) out.push_back(static_cast<Wide>(r.read<T>(what)));
}

void read_array(Reader& r, const std::string& path, GgufValue& out, const std::string& ctx) {
  const VT et = read_value_type(r, path, ctx, "array element type");
  out.elem_type = et;
  if (et == VT::ARRAY) {
    throw BadInput(path + ": " + ctx + ": arrays of arrays are not supported");
  }
  const uint64_t count_at = r.pos();
  const uint64_t count = r.read<uint64_t>(ctx + " (array length)");
  // Every element occupies at least min_value_bytes: reject impossible counts before reserving.
  if (count > r.left() / min_value_bytes(et)) {
    throw BadInput(path + ": " + ctx + ": array of " + std::to_string(count) + " " +
                   value_type_name(et) + " elements (length at byte " + std::to_string(count_at) +
                   ") cannot fit in the " + std::to_string(r.left()) + " bytes left in the file");
  }
  const std::string what = ctx + " (" + value_type_name(et) + " array element)";
  switch (et) {
    case VT::STRING: {
      std::vector<std::string> v;
      v.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i)
        v.push_back(r.read_string(ctx + " (string array element " + std::to_string(i) + ")"));
      out.value = std::move(v);
      break;
    }
    case VT::F32: {
      std::vector<double> v;
      read_number_array<float>(r, count, v, what);
      out.value = std::move(v);
      break;
    }
    case VT::F64: {
      std::vector<double> v;
      read_number_array<double>(r, count, v, what);
      out.value = std::move(v);
      break;
    }
    case VT::U64: {
      std::vector<int64_t> v;
      v.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t x = r.read<uint64_t>(what);
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          throw BadInput(path + ": " + ctx + ": u64 array element " + std::to_string(i) + " = " +
                         std::to_string(x) + " does not fit in int64");
        }
        v.push_back(static_cast<int64_t>(x));
      }
      out.value = std::move(v);
      break;
    }
    default: {  // every other integer type, and bool (as 0/1)
      std::vector<int64_t> v;
      switch (et) {
        case VT::U8: read_number_array<uint8_t>(r, count, v, what); break;
        case VT::I8: read_number_array<int8_t>(r, count, v, what); break;
        case VT::U16: read_number_array<uint16_t>(r, count, v, what); break;
        case VT::I16: read_number_array<int16_t>(r, count, v, what); break;
        case VT::U32: read_number_array<uint32_t>(r, count, v, what); break;
        case VT::I32: read_number_array<int32_t>(r, count, v, what); break;
        case VT::I64: read_number_array<int64_t>(r, count, v, what); break;
        case VT::BOOL:
          v.reserve(static_cast<size_t>(count));
          for (uint64_t i = 0; i < count; ++i) v.push_back(r.read<uint8_t>(what) != 0 ? 1 : 0);
          break;
        default: break;
      }
      out.value = std::move(v);
      break;
    }
  }
}

std::string key_ctx(const std::string& key) {
  return "metadata key '" + key + "'";
}
std::string tensor_ctx(const std::string& name) {
  return "tensor '" + name + "'";
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  return parse(MappedFile::open(path));
}

GgufFile GgufFile::parse(std::shared_ptr<MappedFile> file) {
  if (!file) throw Internal("GgufFile::parse: null file");
  GgufFile g;
  g.path_ = file->path();
  g.file_ = file;
  const std::string& path = g.path_;
  const uint8_t* base = file->data();
  const uint64_t size = file->size();
  Reader r(path, base, size);

  // --- header
  if (size < 4 || std::memcmp(base, "GGUF", 4) != 0) {
    std::string got;
    for (size_t i = 0; i < std::min<uint64_t>(size, 4); ++i) {
      const char c = static_cast<char>(base[i]);
      if (c >= 0x20 && c < 0x7f) {
        got += c;
      } else {
        static const char* hex = "0123456789abcdef";
        got += std::string("\\x") + hex[base[i] >> 4] + hex[base[i] & 15];
      }
    }
    throw BadInput(path + ": not a GGUF file (magic is '" + got + "', expected 'GGUF')");
  }
  r.read<uint32_t>("magic");
  g.version_ = r.read<uint32_t>("header (version)");
  if (g.version_ != 2 && g.version_ != 3 &&
      (__builtin_bswap32(g.version_) == 2 || __builtin_bswap32(g.version_) == 3)) {
    throw BadInput(path + ": big-endian GGUF files are not supported");
  }
  if (g.version_ != 2 && g.version_ != 3) {
    throw BadInput(path + ": GGUF version " + std::to_string(g.version_) +
                   " is not supported (supported: 2, 3)");
  }
  const uint64_t n_tensors = r.read<uint64_t>("header (tensor count)");
  const uint64_t n_kv = r.read<uint64_t>("header (metadata count)");
  // A kv takes >= 8 (key length) + 4 (type) + 1 bytes.
  if (n_kv > r.left() / 13) {
    throw BadInput(path + ": header says " + std::to_string(n_kv) +
                   " metadata entries, more than the file's " + std::to_string(size) +
                   " bytes can hold");
  }

  // --- metadata
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.read_string("metadata entry " + std::to_string(i) + " of " +
                                          std::to_string(n_kv) + " (key)");
    const std::string ctx = key_ctx(key);
    GgufValue v;
    v.type = read_value_type(r, path, ctx, "value type");
    if (v.type == VT::ARRAY) {
      read_array(r, path, v, ctx);
    } else {
      read_scalar(r, v.type, v, ctx);
    }
    if (!g.metadata_.emplace(key, std::move(v)).second) {
      throw BadInput(path + ": " + ctx + " appears twice");
    }
  }

  uint64_t alignment = kDefaultAlignment;
  if (g.has("general.alignment")) {
    const int64_t a = g.get_int("general.alignment");
    if (a <= 0 || (a & (a - 1)) != 0) {
      throw BadInput(path + ": metadata key 'general.alignment': " + std::to_string(a) +
                     " is not a positive power of two");
    }
    alignment = static_cast<uint64_t>(a);
  }

  // --- tensor infos: each takes >= 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8.
  if (n_tensors > r.left() / 32) {
    throw BadInput(path + ": header says " + std::to_string(n_tensors) +
                   " tensors, more than the " + std::to_string(r.left()) +
                   " bytes left after the metadata (at byte " + std::to_string(r.pos()) +
                   ") can describe");
  }
  struct Info {
    std::string name;
    uint64_t offset;
    uint64_t nbytes;
  };
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string name = r.read_string("tensor info " + std::to_string(i) + " of " +
                                           std::to_string(n_tensors) + " (name)");
    const std::string ctx = tensor_ctx(name);
    const uint32_t n_dims = r.read<uint32_t>(ctx + " (n_dims)");
    if (n_dims < 1 || n_dims > kMaxDims) {
      throw BadInput(path + ": " + ctx + ": n_dims = " + std::to_string(n_dims) + " (must be 1.." +
                     std::to_string(kMaxDims) + ")");
    }
    int64_t ne[kMaxDims] = {1, 1, 1, 1};
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t v = r.read<uint64_t>(ctx + " (ne[" + std::to_string(d) + "])");
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && static_cast<uint64_t>(numel) >
                         static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / v)) {
        throw BadInput(path + ": " + ctx + ": dimension ne[" + std::to_string(d) +
                       "] = " + std::to_string(v) + " makes the element count overflow");
      }
      ne[d] = static_cast<int64_t>(v);
      numel *= ne[d];
    }
    const uint32_t type_id = r.read<uint32_t>(ctx + " (type)");
    const uint64_t offset = r.read<uint64_t>(ctx + " (offset)");
    const GgmlType* gt = find_ggml_type(type_id);
    if (gt == nullptr || !gt->supported) {
      throw BadInput(path + ": " + ctx + ": ggml type " + std::to_string(type_id) +
                     (gt ? std::string(" (") + gt->name + ")" : std::string(" (unknown)")) +
                     " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                     "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
    }
    const DType dt = gt->dtype;
    const int64_t block = dtype_block_elems(dt);
    if (ne[0] % block != 0) {
      throw BadInput(path + ": " + ctx + ": row length ne[0] = " + std::to_string(ne[0]) +
                     " is not a multiple of the " + gt->name + " block size " +
                     std::to_string(block));
    }
    const int64_t rows = ne[0] == 0 ? 0 : numel / ne[0];
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    if (ne[0] / block > kMax / dtype_block_bytes(dt) ||
        (rows != 0 && dtype_row_bytes(dt, ne[0]) > kMax / rows)) {
      throw BadInput(path + ": " + ctx + ": byte size of " + std::to_string(numel) + " " +
                     gt->name + " elements overflows");
    }
    const int64_t row_bytes = dtype_row_bytes(dt, ne[0]);
    const uint64_t nbytes = static_cast<uint64_t>(row_bytes * rows);
    if (offset % alignment != 0) {
      throw BadInput(path + ": " + ctx + ": data offset " + std::to_string(offset) +
                     " is not a multiple of the alignment " + std::to_string(alignment));
    }

    RawTensor t;
    t.name = name;
    t.dtype = dt;
    for (int d = static_cast<int>(n_dims) - 1; d >= 0; --d) t.shape.push_back(ne[d]);
    t.nbytes = static_cast<int64_t>(nbytes);
    t.file = file;
    if (!g.tensors_.emplace(name, std::move(t)).second) {
      throw BadInput(path + ": " + ctx + " appears twice");
    }
    g.tensor_order_.push_back(name);
    infos.push_back({name, offset, nbytes});
  }

  // --- data section: starts at the next multiple of the alignment
  const uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
  for (const Info& in : infos) {
    // data_start + offset + nbytes <= size, written so that nothing overflows.
    if (data_start > size || in.offset > size - data_start ||
        in.nbytes > size - data_start - in.offset) {
      throw BadInput(path + ": " + tensor_ctx(in.name) + ": data [" + std::to_string(in.offset) +
                     ", +" + std::to_string(in.nbytes) + ") relative to the data section at byte " +
                     std::to_string(data_start) + " lies outside the file (" +
                     std::to_string(size) + " bytes)");
    }
    g.tensors_.at(in.name).data = base + data_start + in.offset;
  }
  // No two tensors may share bytes.
  std::vector<const Info*> by_offset;
  for (const Info& in : infos)
    if (in.nbytes > 0) by_offset.push_back(&in);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Info* a, const Info* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Info& a = *by_offset[i - 1];
    const Info& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {
      throw BadInput(path + ": " + tensor_ctx(b.name) + ": data at offset " +
                     std::to_string(b.offset) + " overlaps tensor '" + a.name + "' [" +
                     std::to_string(a.offset) + ", +" + std::to_string(a.nbytes) + ")");
    }
  }
  return g;
}

// ---------------------------------------------------------------- typed getters

namespace {

[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GgufValue& v,
                             const char* expected) {
  std::string got = value_type_name(v.type);
  if (v.type == VT::ARRAY) got += std::string(" of ") + value_type_name(v.elem_type);
  throw BadInput(path + ": metadata key '" + key + "' has type " + got + ", expected " + expected);
}

int64_t scalar_as_int(const std::string& path, const std::string& key, const GgufValue& v) {
  if (is_signed_int(v.type)) return std::get<int64_t>(v.value);
  if (is_unsigned_int(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.value);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw BadInput(path + ": metadata key '" + key + "': value " + std::to_string(u) +
                     " does not fit in int64");
    }
    return static_cast<int64_t>(u);
  }
  wrong_type(path, key, v, "an integer");
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  if (it->second.type != VT::STRING) wrong_type(path_, key, it->second, "string");
  return std::get<std::string>(it->second.value);
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  return scalar_as_int(path_, key, it->second);
}

double GgufFile::get_float(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  const GgufValue& v = it->second;
  if (is_float(v.type)) return std::get<double>(v.value);
  if (is_signed_int(v.type)) return static_cast<double>(std::get<int64_t>(v.value));
  if (is_unsigned_int(v.type)) return static_cast<double>(std::get<uint64_t>(v.value));
  wrong_type(path_, key, v, "a number");
}

bool GgufFile::get_bool(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  if (it->second.type != VT::BOOL) wrong_type(path_, key, it->second, "bool");
  return std::get<bool>(it->second.value);
}

const std::vector<std::string>& GgufFile::get_string_array(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  const GgufValue& v = it->second;
  if (v.type != VT::ARRAY || v.elem_type != VT::STRING)
    wrong_type(path_, key, v, "array of string");
  return std::get<std::vector<std::string>>(v.value);
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  const GgufValue& v = it->second;
  if (v.type != VT::ARRAY || !is_int(v.elem_type)) wrong_type(path_, key, v, "array of integers");
  return std::get<std::vector<int64_t>>(v.value);
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw BadInput(path_ + ": metadata key '" + key + "' is missing");
  const GgufValue& v = it->second;
  if (v.type == VT::ARRAY && is_float(v.elem_type)) return std::get<std::vector<double>>(v.value);
  if (v.type == VT::ARRAY && is_int(v.elem_type)) {
    const auto& ints = std::get<std::vector<int64_t>>(v.value);
    return std::vector<double>(ints.begin(), ints.end());
  }
  wrong_type(path_, key, v, "array of numbers");
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

}  // namespace medtune::io
