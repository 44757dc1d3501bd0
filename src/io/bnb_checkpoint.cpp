// Reader for bitsandbytes 4-bit Hugging Face checkpoints (see bnb_checkpoint.h).
// Its own small safetensors header walk: the general reader (safetensors.cpp) only admits the
// dtypes a model computes with, and bitsandbytes stores its codes and JSON state as U8.
#include "io/bnb_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/nf4.h"
#include "io/whole_file.h"

namespace medtune::io {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSupported = "supported: bitsandbytes 4-bit nf4 with blocksize 64";
const std::string kNf4State = ".quant_state.bitsandbytes__nf4";
const std::string kFp4State = ".quant_state.bitsandbytes__fp4";

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// One stored tensor, any safetensors dtype.
struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
  std::shared_ptr<MappedFile> file;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

int64_t elem_bytes(const std::string& dt) {
  if (dt == "F64" || dt == "I64" || dt == "U64") return 8;
  if (dt == "F32" || dt == "I32" || dt == "U32") return 4;
  if (dt == "F16" || dt == "BF16" || dt == "I16" || dt == "U16") return 2;
  if (dt == "U8" || dt == "I8" || dt == "BOOL") return 1;
  return 0;
}

void read_file_entries(const std::string& path, std::map<std::string, Entry>& out) {
  auto file = MappedFile::open(path);
  const uint8_t* bytes = file->data();
  const uint64_t size = file->size();
  if (size < 8) throw BadInput(path + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[i];
  if (hlen > size - 8) throw BadInput(path + ": header length exceeds the file size");
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + hlen);
  } catch (const json::exception& e) {
    throw BadInput(path + ": header is not valid JSON: " + e.what());
  }
  const uint64_t data_start = 8 + hlen, data_size = size - data_start;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor '" + name + "'";
    try {
      Entry t;
      t.dtype = e.at("dtype").get<std::string>();
      for (const auto& d : e.at("shape")) t.shape.push_back(d.get<int64_t>());
      const auto b = e.at("data_offsets").at(0).get<uint64_t>(), en = e.at("data_offsets").at(1).get<uint64_t>();
      const int64_t eb = elem_bytes(t.dtype);
      if (eb == 0) throw BadInput(where + ": unknown dtype " + t.dtype);
      if (b > en || en > data_size || static_cast<int64_t>(en - b) != t.numel() * eb)
        throw BadInput(where + ": data_offsets do not match its shape and dtype or lie outside the file");
      t.data = bytes + data_start + b;
      t.nbytes = static_cast<int64_t>(en - b);
      t.file = file;
      if (!out.emplace(name, std::move(t)).second) throw BadInput(where + ": appears twice");
    } catch (const json::exception& ex) {
      throw BadInput(where + ": malformed header entry: " + ex.what());
    }
  }
}

const Entry& need(const std::map<std::string, Entry>& all, const std::string& name, const std::string& dtype,
                  int64_t numel, const std::string& group) {
  auto it = all.find(name);
  if (it == all.end()) throw BadInput(group + ": bitsandbytes tensor '" + name + "' is missing");
  if (it->second.dtype != dtype || it->second.numel() != numel)
    throw BadInput(group + ": '" + name + "' is " + it->second.dtype + " with " +
                   std::to_string(it->second.numel()) + " elements, expected " + dtype + " with " +
                   std::to_string(numel));
  return it->second;
}

std::vector<float> f32s(const Entry& e) {
  std::vector<float> v(static_cast<size_t>(e.numel()));
  if (!v.empty()) std::memcpy(v.data(), e.data, v.size() * 4);
  return v;
}

// One bitsandbytes group W -> a DType::NF4 RawTensor.
RawTensor decode_nf4(const std::map<std::string, Entry>& all, const std::string& w, const std::string& dir) {
  const std::string group = dir + ": " + w;
  const Entry& st = all.at(w + kNf4State);
  json qs;
  try {
    qs = json::parse(std::string(reinterpret_cast<const char*>(st.data), static_cast<size_t>(st.nbytes)));
  } catch (const json::exception& e) {
    throw BadInput(group + kNf4State + ": not valid JSON: " + e.what());
  }
  try {
    const std::string qt = qs.at("quant_type").get<std::string>();
    const int64_t blocksize = qs.at("blocksize").get<int64_t>();
    if (qt != "nf4" || blocksize != nf4::kBlock)
      throw BadInput(group + ": found bitsandbytes " + qt + " with blocksize " + std::to_string(blocksize) +
                     " (" + kSupported + ")");
    const auto shape = qs.at("shape").get<std::vector<int64_t>>();
    if (shape.size() != 2 || shape[1] % nf4::kBlock != 0)
      throw BadInput(group + ": quantized shape must be (rows, cols) with cols a multiple of 64");
    const int64_t rows = shape[0], cols = shape[1], n = rows * cols, nb = n / nf4::kBlock;
    const Entry& packed = need(all, w, "U8", n / 2, group);
    const std::vector<float> qmap = f32s(need(all, w + ".quant_map", "F32", 16, group));
    if (std::memcmp(qmap.data(), nf4::kCode.data(), 16 * 4) != 0)
      throw BadInput(group + ".quant_map: not bitsandbytes' NF4 table");
    std::vector<float> absmax(static_cast<size_t>(nb));
    if (qs.contains("nested_blocksize")) {
      const int64_t nbs = qs.at("nested_blocksize").get<int64_t>();
      if (nbs <= 0) throw BadInput(group + ": nested_blocksize must be positive");
      const auto offset = static_cast<float>(qs.at("nested_offset").get<double>());
      const Entry& q = need(all, w + ".absmax", "U8", nb, group);
      const std::vector<float> absmax2 = f32s(need(all, w + ".nested_absmax", "F32", (nb + nbs - 1) / nbs, group));
      const std::vector<float> map = f32s(need(all, w + ".nested_quant_map", "F32", 256, group));
      nf4::dequantize_absmax(q.data, absmax2.data(), offset, nb, map.data(), nbs, absmax.data());
    } else {
      absmax = f32s(need(all, w + ".absmax", "F32", nb, group));
    }
    std::vector<uint8_t> blocks = nf4::row_blocks(packed.data, absmax.data(), rows, cols);
    RawTensor t;
    t.name = w;
    t.dtype = DType::NF4;
    t.shape = {rows, cols};
    t.nbytes = static_cast<int64_t>(blocks.size());
    t.file = MappedFile::from_bytes(group + " (NF4)", std::move(blocks));
    t.data = t.file->data();
    return t;
  } catch (const json::exception& e) {
    throw BadInput(group + kNf4State + ": " + e.what());
  }
}

}  // namespace

std::string quantization_method(const std::string& config_json_path) {
  const json c = read_json_file(config_json_path);
  auto it = c.find("quantization_config");
  if (it == c.end() || it->is_null()) return "";
  if (!it->is_object()) throw BadInput(config_json_path + ": quantization_config must be an object");
  const std::string method = it->value("quant_method", std::string(it->value("load_in_4bit", false) ? "bitsandbytes" : "?"));
  if (method != "bitsandbytes")
    throw BadInput(config_json_path + ": quantization_config.quant_method '" + method + "' is not supported (" +
                   kSupported + ")");
  if (it->value("load_in_8bit", false) || it->value("_load_in_8bit", false))
    throw BadInput(config_json_path + ": found bitsandbytes 8-bit (LLM.int8, load_in_8bit) weights (" +
                   kSupported + ")");
  const std::string qt = it->value("bnb_4bit_quant_type", std::string("nf4"));
  if (qt != "nf4")
    throw BadInput(config_json_path + ": found bitsandbytes 4-bit " + qt + " (bnb_4bit_quant_type) (" +
                   kSupported + ")");
  return method;
}

std::map<std::string, RawTensor> read_bnb_4bit_dir(const std::string& dir) {
  std::vector<std::string> files;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::is_regular_file(index)) {
    std::set<std::string> shards;
    const json j = read_json_file(index.string());
    for (const auto& [name, f] : j.at("weight_map").items()) shards.insert(f.get<std::string>());
    for (const auto& s : shards) files.push_back((fs::path(dir) / s).string());
  } else {
    files.push_back((fs::path(dir) / "model.safetensors").string());
  }
  std::map<std::string, Entry> all;
  for (const auto& f : files) read_file_entries(f, all);

  std::set<std::string> consumed;
  std::map<std::string, RawTensor> out;
  for (const auto& [name, e] : all) {
    if (ends_with(name, kFp4State))
      throw BadInput(dir + ": " + name + ": found bitsandbytes fp4 (" + kSupported + ")");
    if (ends_with(name, ".SCB") || ends_with(name, ".weight_format"))
      throw BadInput(dir + ": " + name + ": found bitsandbytes 8-bit (LLM.int8) weights (" + kSupported + ")");
    if (!ends_with(name, kNf4State)) continue;
    const std::string w = name.substr(0, name.size() - kNf4State.size());
    out[w] = decode_nf4(all, w, dir);
    for (const char* suf : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"})
      consumed.insert(w + suf);
    consumed.insert(name);
  }
  for (const auto& [name, e] : all) {
    if (consumed.count(name)) continue;
    RawTensor t;
    t.name = name;
    if (e.dtype == "F32") t.dtype = DType::F32;
    else if (e.dtype == "F16") t.dtype = DType::F16;
    else if (e.dtype == "BF16") t.dtype = DType::BF16;
    else
      throw BadInput(dir + ": tensor '" + name + "' has dtype " + e.dtype +
                     " and is not part of a bitsandbytes 4-bit group (" + kSupported + ")");
    t.shape = e.shape;
    t.data = e.data;
    t.nbytes = e.nbytes;
    t.file = e.file;
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace medtune::io
