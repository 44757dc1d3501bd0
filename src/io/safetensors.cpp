// safetensors reader. The format (https://github.com/huggingface/safetensors) is:
//   u64 LE header length N | N bytes of JSON | data section
// JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
// Offsets are relative to the data section. We validate exactly what the reference (Rust) reader
// validates, so a file Python's safetensors rejects is rejected here too: the tensors must cover
// the data section completely, without holes or overlaps (the spec forbids holes to prevent
// polyglot files), and each byte size must equal numel x dtype size.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/whole_file.h"

namespace medtune::io {

namespace {

using nlohmann::json;

// Same bound as the reference reader (MAX_HEADER_SIZE = 100'000'000): a larger header is surely
// corrupt, and parsing it would only waste memory.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// safetensors dtype string -> our DType. Types we recognise but cannot compute with are reported
// as unsupported rather than unknown, so the user learns it is a limitation, not a corrupt file.
bool dtype_from_safetensors(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
      {"F64", DType::F64}, {"I64", DType::I64}, {"I32", DType::I32},
  };
  for (const auto& [name, t] : kTable) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Reads one tensor's header entry. `data_size` is the size of the data section.
RawTensor parse_tensor_entry(const std::string& path, const std::string& name, const json& e,
                             uint64_t data_size, uint64_t* begin, uint64_t* end) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!e.is_object()) throw BadInput(where + ": header entry must be an object");
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) throw BadInput(where + ": 'dtype' missing or not a string");
  if (sh == e.end() || !sh->is_array()) throw BadInput(where + ": 'shape' missing or not an array");
  if (off == e.end() || !off->is_array() || off->size() != 2)
    throw BadInput(where + ": 'data_offsets' must be an array [begin, end]");

  RawTensor t;
  t.name = name;
  const std::string dtype_s = dt->get<std::string>();
  if (!dtype_from_safetensors(dtype_s, &t.dtype))
    throw BadInput(where + ": dtype " + dtype_s +
                   " is not supported (supported: F32, F16, BF16, F64, I64, I32)");

  // numel must not overflow int64 even for hostile shapes: check each multiplication.
  int64_t numel = 1;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned())
      throw BadInput(where + ": shape entries must be non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw BadInput(where + ": shape dimension " + std::to_string(v) + " is too large");
    const auto dim = static_cast<int64_t>(v);
    if (dim != 0 && numel > std::numeric_limits<int64_t>::max() / dim)
      throw BadInput(where + ": shape overflows");
    numel *= dim;
    t.shape.push_back(dim);
  }
  for (const json& o : *off)
    if (!o.is_number_unsigned())
      throw BadInput(where + ": data_offsets must be non-negative integers");
  *begin = (*off)[0].get<uint64_t>();
  *end = (*off)[1].get<uint64_t>();
  if (*begin > *end)
    throw BadInput(where + ": data_offsets [" + std::to_string(*begin) + ", " +
                   std::to_string(*end) + "] are reversed");
  if (*end > data_size)
    throw BadInput(where + ": data_offsets [" + std::to_string(*begin) + ", " +
                   std::to_string(*end) + "] lie outside the data section of " +
                   std::to_string(data_size) + " bytes");
  const int64_t elem = dtype_block_bytes(t.dtype);
  if (numel > std::numeric_limits<int64_t>::max() / elem)
    throw BadInput(where + ": shape " + shape_str(t.shape) + " is too large");
  t.nbytes = numel * elem;
  if (static_cast<uint64_t>(t.nbytes) != *end - *begin)
    throw BadInput(where + ": holds " + std::to_string(*end - *begin) + " bytes, but shape " +
                   shape_str(t.shape) + " of " + dtype_s + " needs " + std::to_string(t.nbytes));
  return t;
}

}  // namespace

SafetensorsFile parse_safetensors(std::shared_ptr<MappedFile> file) {
  if (!file) throw Internal("parse_safetensors: null file");
  const std::string& path = file->path();
  const uint8_t* bytes = file->data();
  const uint64_t size = file->size();
  if (size < 8)
    throw BadInput(path + ": not a safetensors file (" + std::to_string(size) +
                   " bytes, shorter than the 8-byte header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes)
    throw BadInput(path + ": header length " + std::to_string(header_len) +
                   " exceeds the maximum of " + std::to_string(kMaxHeaderBytes) +
                   " bytes (not a safetensors file?)");
  if (header_len > size - 8)
    throw BadInput(path + ": header length " + std::to_string(header_len) +
                   " exceeds the file size " + std::to_string(size) + " (truncated file?)");
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  // The reference reader demands a JSON object; checking the first byte gives a clearer message
  // than the parser's for files that are not safetensors at all.
  if (header_len == 0 || header_begin[0] != '{')
    throw BadInput(path + ": header is not a JSON object");

  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    throw BadInput(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw BadInput(path + ": header is not a JSON object");

  SafetensorsFile out;
  out.path = path;
  out.file = file;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw BadInput(path + ": '__metadata__' must be an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw BadInput(path + ": '__metadata__' value for '" + mk + "' must be a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    uint64_t b = 0, e = 0;
    RawTensor t = parse_tensor_entry(path, key, value, data_size, &b, &e);
    t.data = bytes + data_start + b;
    t.file = file;
    auto [it, inserted] = out.tensors.emplace(key, std::move(t));
    if (!inserted) throw BadInput(path + ": tensor '" + key + "' appears twice in the header");
    spans.push_back({b, e, &it->first});
  }

  // Coverage: sorted by (begin, end), each tensor starts where the previous one ended and the last
  // ends at the end of the file. Zero-sized tensors occupy no bytes and may sit anywhere.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (s.begin < covered)
      throw BadInput(path + ": tensor '" + *s.name + "' (bytes " + std::to_string(s.begin) + ".." +
                     std::to_string(s.end) + ") overlaps tensor '" + *prev + "' (ends at " +
                     std::to_string(covered) + ")");
    if (s.begin > covered)
      throw BadInput(path + ": tensor '" + *s.name + "' starts at byte " + std::to_string(s.begin) +
                     " of the data section, leaving a hole after byte " + std::to_string(covered) +
                     " (safetensors forbids holes)");
    covered = s.end;
    prev = s.name;
  }
  if (covered != data_size)
    throw BadInput(path + ": the tensors cover " + std::to_string(covered) +
                   " bytes of a data section of " + std::to_string(data_size) +
                   " bytes (truncated or padded file?)");
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) {
  return parse_safetensors(MappedFile::open(path));
}

namespace {

// The sharded layout written by transformers' save_pretrained:
//   {"metadata": {...}, "weight_map": {"<tensor>": "model-00001-of-00002.safetensors", ...}}
std::map<std::string, RawTensor> read_sharded(const std::filesystem::path& dir,
                                              const std::string& index_path) {
  const json index = read_json_file(index_path);
  if (!index.is_object()) throw BadInput(index_path + ": not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    throw BadInput(index_path + ": field 'weight_map' missing or not an object");

  // Each shard is opened and validated once, however many tensors it holds.
  std::map<std::string, SafetensorsFile> shards;
  std::map<std::string, RawTensor> out;
  for (const auto& [name, shard_v] : wm->items()) {
    if (!shard_v.is_string())
      throw BadInput(index_path + ": weight_map entry for tensor '" + name +
                     "' must be a file name string");
    const std::string shard = shard_v.get<std::string>();
    // A shard name comes from a downloaded file: keep it inside the model directory.
    const std::filesystem::path rel(shard);
    if (shard.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const auto& p) { return p == ".."; }))
      throw BadInput(index_path + ": weight_map entry for tensor '" + name + "' names shard '" +
                     shard + "' outside the model directory");
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const std::string shard_path = (dir / rel).string();
      if (!std::filesystem::is_regular_file(shard_path))
        throw BadInput(index_path + ": tensor '" + name + "' is in shard '" + shard +
                       "', which does not exist (" + shard_path + ")");
      it = shards.emplace(shard, read_safetensors(shard_path)).first;
    }
    auto t = it->second.tensors.find(name);
    if (t == it->second.tensors.end())
      throw BadInput(index_path + ": tensor '" + name + "' is listed in shard '" + shard +
                     "' but that shard does not contain it");
    out.emplace(name, t->second);
  }
  // A tensor stored in two shards is ambiguous (which copy is right?): refuse it.
  std::map<std::string, std::string> seen;
  for (const auto& [shard, f] : shards) {
    for (const auto& [name, t] : f.tensors) {
      auto [it, inserted] = seen.emplace(name, shard);
      if (!inserted)
        throw BadInput(index_path + ": tensor '" + name + "' is present in two shards, '" +
                       it->second + "' and '" + shard + "'");
    }
  }
  return out;
}

}  // namespace

std::map<std::string, RawTensor> read_safetensors_dir(const std::string& dir) {
  const std::filesystem::path d(dir);
  const auto single = d / "model.safetensors";
  const auto index = d / "model.safetensors.index.json";
  // transformers prefers the single file when both exist; so do we.
  if (std::filesystem::is_regular_file(single)) return read_safetensors(single.string()).tensors;
  if (std::filesystem::is_regular_file(index)) return read_sharded(d, index.string());
  throw BadInput(dir + ": no model.safetensors or model.safetensors.index.json in this directory");
}

}  // namespace medtune::io
