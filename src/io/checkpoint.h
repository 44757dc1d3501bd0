// A model checkpoint opened from a Hugging Face directory or a GGUF file, presented in one form:
// Hugging Face tensor names and PyTorch shapes, weights left in the file's mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/raw_tensor.h"
#include "io/gguf.h"
#include "model/config.h"

namespace medtune::io {

struct Checkpoint {
  std::string path;    // what the user named: a directory or a .gguf file
  std::string format;  // "safetensors" or "gguf"
  ModelConfig config;
  // Keyed by Hugging Face names ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight", ...).
  std::map<std::string, RawTensor> tensors;
  // llama.cpp's converter permutes the rows of q_proj/k_proj for its interleaved rope (llama and
  // mistral, not qwen2). When true, those two weights are stored permuted; the model undoes it.
  bool qk_rows_permuted = false;
  // The GGUF file itself when format == "gguf" (tokenizer and chat template live in its metadata).
  std::shared_ptr<GgufFile> gguf;
};

// `path` is a directory holding config.json + safetensors, or a .gguf file.
// Checks that every tensor the architecture needs is present with the right shape.
Checkpoint open_checkpoint(const std::string& path);

// GGUF -> Checkpoint (used by open_checkpoint). Maps llama.cpp names to HF names and
// llama.cpp metadata (llama.*, qwen2.*) to ModelConfig.
Checkpoint checkpoint_from_gguf(std::shared_ptr<GgufFile> gguf);

// llama.cpp's GGUF name of a Hugging Face tensor name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"), or "" when it has none.
std::string gguf_tensor_name(const std::string& hf_name);

// Every tensor name the architecture expects, with its PyTorch shape, for validation.
std::map<std::string, std::vector<int64_t>> expected_tensor_shapes(const ModelConfig& c);

}  // namespace medtune::io
