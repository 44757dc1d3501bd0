// safetensors reader: an 8-byte little-endian header length, a JSON header, then raw tensor bytes.
// Tensors stay in the memory mapping; nothing is copied.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/mapped_file.h"
#include "core/raw_tensor.h"

namespace medtune::io {

struct SafetensorsFile {
  std::string path;
  std::shared_ptr<MappedFile> file;
  std::map<std::string, RawTensor> tensors;            // by name, as stored
  std::map<std::string, std::string> metadata;         // the "__metadata__" object (string values)
};

// Validates the header (JSON, dtypes, shapes, offsets inside the file, no overlaps, sizes matching
// shape x dtype). Malformed input throws BadInput naming the file and the tensor or field.
SafetensorsFile read_safetensors(const std::string& path);
SafetensorsFile parse_safetensors(std::shared_ptr<MappedFile> file);

// A model directory's weights: model.safetensors, or model.safetensors.index.json with its shards.
// The shards' tensors are merged by name; a tensor listed in the index but absent from its shard
// (or present in two shards) is an error naming both.
std::map<std::string, RawTensor> read_safetensors_dir(const std::string& dir);

}  // namespace medtune::io
