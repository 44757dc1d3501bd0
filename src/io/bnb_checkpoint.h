// Hugging Face checkpoints saved by bitsandbytes in 4-bit form (transformers' save_pretrained of a
// model loaded with load_in_4bit): each quantized Linear weight W is stored as
//   W                                  U8 (numel/2, 1)  NF4 codes, two a byte, first high
//   W.absmax                           U8 (blocks)      with double quantization, else F32
//   W.quant_map                        F32 (16)         the NF4 values
//   W.nested_absmax, W.nested_quant_map F32 (blocks/256), F32 (256)  (double quantization)
//   W.quant_state.bitsandbytes__nf4    U8 (JSON bytes)  quant_type, blocksize, shape, dtype,
//                                                       nested_blocksize, nested_offset
// The reader turns each group into one DType::NF4 tensor (core/nf4.h: absmax resolved exactly as
// bitsandbytes' dequantize_4bit does, owned in memory) named W with W's real shape; every other
// tensor stays mapped as usual.
#pragma once

#include <map>
#include <string>

#include "core/raw_tensor.h"

namespace medtune::io {

// config.json's quantization_config.quant_method, "" when it has none.
std::string quantization_method(const std::string& config_json_path);

// The model directory's tensors (model.safetensors or the shards of its index) with bitsandbytes
// NF4 groups decoded. Unsupported quantizations (fp4, 8-bit, a block size other than 64, other
// quant_methods) throw BadInput naming what was found and what is supported.
std::map<std::string, RawTensor> read_bnb_4bit_dir(const std::string& dir);

}  // namespace medtune::io
