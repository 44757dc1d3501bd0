// A Llama-family model's weights as the forward pass uses them: large matrices stay in the
// checkpoint mapping in their stored dtype; small vectors (norms, biases) are widened to fp32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ops/linear.h"

namespace medtune::model {

struct LayerWeights {
  std::vector<float> input_norm;      // (C)
  std::vector<float> post_attn_norm;  // (C)
  ops::StoredMatrix q, k, v, o;       // (NH*HD, C), (NKV*HD, C), (NKV*HD, C), (C, NH*HD)
  std::vector<float> q_bias, k_bias, v_bias;  // (NH*HD), (NKV*HD), (NKV*HD); empty when absent
  std::vector<float> o_bias;  // (C): llama with attention_bias=true (not qwen2); empty when absent
  ops::StoredMatrix gate, up, down;   // (F, C), (F, C), (C, F)
};

// How the frozen linear weights of the blocks are held in memory.
//  kNone: as stored in the checkpoint (mapped, any supported dtype, never copied);
//  kNf4:  quantized at load to bitsandbytes NF4 with double quantization (QLoRA's
//         load_in_4bit), owned by ModelWeights; the mapped originals are released.
enum class WeightQuant { kNone, kNf4 };

struct ModelWeights {
  ops::StoredMatrix embed;    // (V, C)
  ops::StoredMatrix lm_head;  // (V, C); the same bytes as `embed` when tied
  std::vector<float> final_norm;  // (C)
  std::vector<LayerWeights> layers;
  // llama.cpp's GGUF converter stores q/k rows permuted for its interleaved rope; when set, the
  // forward pass de-interleaves q and k after projecting (see ops::undo_gguf_qk_permutation).
  bool qk_rows_permuted = false;
  // Storage for weights quantized at load (WeightQuant::kNf4); the StoredMatrix views above
  // point into these buffers. Shared, so that copies of ModelWeights stay valid.
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned;
};

// Views into `ckpt` (which must outlive the result). Throws BadInput for unsupported dtypes.
// quant = kNf4 quantizes q/k/v/o/gate/up/down of every block as bitsandbytes' Linear4bit does
// (transformers' load_in_4bit: embeddings, norms and lm_head stay as they are); it needs an
// F32/F16/BF16 base and rows of whole 64-element blocks.
ModelWeights bind_weights(const io::Checkpoint& ckpt, WeightQuant quant = WeightQuant::kNone);

// Resident bytes of the base weights once bound with `quant`: with kNf4, the block linears as
// DType::NF4 (36 bytes per 64 weights) and every other tensor as stored (mapped). The second form
// needs only the config and the stored dtype of the weights (for plans of models not at hand).
struct WeightBytes {
  int64_t quantized = 0;  // owned NF4 linears (0 unless kNf4)
  int64_t mapped = 0;     // read from the checkpoint mapping
};
WeightBytes planned_weight_bytes(const io::Checkpoint& ckpt, WeightQuant quant);
WeightBytes planned_weight_bytes(const ModelConfig& c, DType stored, WeightQuant quant);

// Whether every block linear of the base (each layer's q/k/v/o and gate/up/down weights) is, once
// bound with `quant`, of a dtype that the int8 route computes (ops::int8_path): what `--precision
// auto` asks of a model before it picks int8 for generate and serve (backend::parse_inference_precision).
bool block_linears_take_int8(const io::Checkpoint& ckpt, WeightQuant quant);

// Elements that keep_bf16_copies copies for `ckpt` bound with `quant`: every layer's q/k/v/o and
// gate/up/down and the lm_head (its own, or the embedding's when tied), except those bound as
// BF16 (read as they are).
int64_t bf16_copy_elements(const io::Checkpoint& ckpt, WeightQuant quant);
// At `precision: bf16` on the CPU, where oneDNN multiplies bf16 natively: gives each of those
// matrices not stored as BF16 a copy of its rows rounded to bf16 (ops::StoredMatrix::bf16), owned
// by `w`, so that a training step reads them instead of decoding and rounding the frozen base at
// every use (2-3 times a step). The same bf16 values either way, so the same bits. Returns the
// bytes it allocated (2 per element).
int64_t keep_bf16_copies(ModelWeights& w);

// "none" / "nf4" -> WeightQuant; BadInput naming `what` (e.g. "--base-quant") otherwise.
WeightQuant parse_weight_quant(const std::string& s, const std::string& what);

// An F32/F16/BF16 (rows, cols) matrix as DType::NF4 rows, bit-identical in value to
// bitsandbytes.functional.quantize_4bit(w, blocksize=64, quant_type="nf4",
// compress_statistics=True) followed by dequantize_4bit. `name` is for error messages.
std::shared_ptr<const std::vector<uint8_t>> quantize_nf4_rows(DType dtype, const uint8_t* data,
                                                              int64_t rows, int64_t cols,
                                                              const std::string& name);


}  // namespace medtune::model
