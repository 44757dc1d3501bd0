// safetensors writer. The reference (safetensors/src/tensor.rs, `prepare`) sorts the tensors by
// dtype in descending order of its Dtype enum, which lists types in increasing alignment
// (... F16, BF16, I32, F32, F64, I64 ...), then by name, so every tensor's data starts aligned to
// its element size once the header is padded to 8 bytes. It serialises the header with
// serde_json (compact, "dtype", "shape", "data_offsets" in that order) and pads it with spaces.
// We reproduce that exactly so a file we write is byte-identical to one Python writes (checked
// against a fixture in tests/unit/io/test_safetensors_writer.cpp).
#include "io/safetensors_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "core/error.h"
#include "io/atomic_file.h"

namespace medtune::io {

namespace {

// Position in the reference's Dtype enum among the types we write; higher sorts first.
int alignment_rank(DType t) {
  switch (t) {
    case DType::F16: return 0;
    case DType::BF16: return 1;
    case DType::I32: return 2;
    case DType::F32: return 3;
    case DType::F64: return 4;
    case DType::I64: return 5;
    default: return -1;
  }
}

// serde_json and nlohmann escape strings the same way for valid UTF-8 with ensure_ascii off:
// \" \\ \b \f \n \r \t, other controls as \u00xx (lowercase hex), everything else verbatim.
std::string json_string(const std::string& s, const std::string& what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception& e) {
    throw Internal("safetensors writer: " + what + " is not valid UTF-8: " + e.what());
  }
}

struct Planned {
  const TensorToWrite* t;
  uint64_t nbytes;
};

struct Layout {
  std::string header;  // padded JSON
  std::vector<Planned> order;
};

Layout plan(const std::vector<TensorToWrite>& tensors,
            const std::map<std::string, std::string>& metadata) {
  Layout out;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    const std::string where = "safetensors writer: tensor '" + t.name + "'";
    if (t.name.empty()) throw Internal("safetensors writer: a tensor has an empty name");
    if (t.name == "__metadata__") throw Internal(where + ": the name is reserved for metadata");
    if (!names.insert(t.name).second) throw Internal(where + " appears twice");
    if (alignment_rank(t.dtype) < 0)
      throw Internal(where + ": dtype " + std::string(dtype_name(t.dtype)) +
                     " cannot be stored in safetensors (F32, F16, BF16, F64, I64, I32)");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Internal(where + ": negative dimension " + std::to_string(d));
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t nbytes = numel * static_cast<uint64_t>(dtype_block_bytes(t.dtype));
    if (nbytes > 0 && t.data == nullptr) throw Internal(where + ": data is null");
    out.order.push_back({&t, nbytes});
  }
  std::sort(out.order.begin(), out.order.end(), [](const Planned& a, const Planned& b) {
    const int ra = alignment_rank(a.t->dtype), rb = alignment_rank(b.t->dtype);
    return ra != rb ? ra > rb : a.t->name < b.t->name;
  });

  std::string& h = out.header;
  h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      h += json_string(k, "metadata key '" + k + "'") + ':' +
           json_string(v, "metadata value for '" + k + "'");
    }
    h += '}';
  }
  uint64_t offset = 0;
  for (const Planned& p : out.order) {
    if (h.size() > 1) h += ',';
    h += json_string(p.t->name, "tensor name '" + p.t->name + "'");
    h += ":{\"dtype\":\"";
    h += dtype_name(p.t->dtype);
    h += "\",\"shape\":[";
    for (size_t i = 0; i < p.t->shape.size(); ++i) {
      if (i) h += ',';
      h += std::to_string(p.t->shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + ',' +
         std::to_string(offset + p.nbytes) + "]}";
    offset += p.nbytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  return out;
}

std::array<uint8_t, 8> le64(uint64_t v) {
  std::array<uint8_t, 8> b{};
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  const Layout l = plan(tensors, metadata);
  // Sized once and filled with memcpy (GCC 12 reports false -Wstringop-overflow on chained
  // vector::insert here).
  size_t total = 8 + l.header.size();
  for (const Planned& p : l.order) total += p.nbytes;
  std::vector<uint8_t> out(total);
  const auto n = le64(l.header.size());
  std::memcpy(out.data(), n.data(), 8);
  std::memcpy(out.data() + 8, l.header.data(), l.header.size());
  size_t at = 8 + l.header.size();
  for (const Planned& p : l.order) {
    if (p.nbytes) std::memcpy(out.data() + at, p.t->data, p.nbytes);
    at += p.nbytes;
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const Layout l = plan(tensors, metadata);
  const auto n = le64(l.header.size());
  std::vector<std::span<const uint8_t>> pieces;
  pieces.reserve(l.order.size() + 2);
  pieces.emplace_back(n.data(), n.size());
  pieces.emplace_back(reinterpret_cast<const uint8_t*>(l.header.data()), l.header.size());
  for (const Planned& p : l.order)
    pieces.emplace_back(static_cast<const uint8_t*>(p.t->data), p.nbytes);
  atomic_write_file(path, pieces);
}

}  // namespace medtune::io
