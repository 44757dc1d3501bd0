// What `medtune info` reports about a checkpoint: architecture, sizes, dtypes, memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"

namespace medtune::model {

struct ModelInfo {
  std::string path, format, architecture;
  int64_t parameters = 0;                     // elements of every model tensor
  int64_t weight_bytes = 0;                   // bytes of those tensors as stored (mapped, not copied)
  std::map<std::string, int64_t> dtype_tensors;  // dtype name -> number of tensors
  int64_t kv_bytes_per_token = 0;             // fp32 keys + values, all layers
  int64_t context = 0;                        // the context the memory estimate is for
  int64_t estimated_bytes = 0;                // weights + KV cache at `context` + activations
  ModelConfig config;
};

// `context` 0 = the model's max_position_embeddings capped at 4096.
ModelInfo describe(const io::Checkpoint& ckpt, int64_t context = 0);
nlohmann::json to_json(const ModelInfo& info);
std::string to_text(const ModelInfo& info);

}  // namespace medtune::model
