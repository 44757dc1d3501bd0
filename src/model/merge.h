// Merging a LoRA adapter into its base weights, for export:
//   W' = W + scaling * B A,   W: (out, in), B: (out, r), A: (r, in)
// W is dequantized exactly to fp32 (quantized GGUF sources included), the sum is formed in fp64,
// and the result is rounded once to the output dtype (see round_once_*).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "model/lora.h"

namespace medtune::model {

// One tensor of the merged model, in Hugging Face naming and row order, held in fp64.
struct MergedTensor {
  std::string hf_name;          // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // PyTorch order: (out, in) for matrices, (C) for norms
  std::vector<double> values;   // numel values, row-major
};

// The HF names export writes, in a stable order (embedding, then per layer, final norm, lm_head);
// lm_head is left out when the checkpoint ties it to the embedding. Tensors the checkpoint holds
// under other names (rope_freqs.weight of llama3 GGUFs) are not listed.
std::vector<std::string> merged_tensor_names(const io::Checkpoint& ckpt);

// The tensor `hf_name` of `ckpt` with `lora` (may be null) merged in, in HF row order: q/k rows
// that a GGUF file stores permuted (ckpt.qk_rows_permuted) are put back first, so the adapter,
// which is in HF order, applies to the right rows. Throws BadInput when the lora's shapes do not
// match the checkpoint.
MergedTensor merge_tensor(const io::Checkpoint& ckpt, const LoraWeights* lora,
                          const std::string& hf_name);

// Rounding an fp64 value once to a narrower type (round to nearest, ties to even). For f16/bf16
// the value goes through fp32 with round-to-odd, which keeps the final rounding correct because
// fp32 carries more than two extra bits over either type (Boldo & Melquiond, 2008).
float round_once_f32(double x);
uint16_t round_once_f16(double x);
uint16_t round_once_bf16(double x);

// Throws BadInput naming the tensor, element and value when a merged value cannot be stored in
// `dtype` (it would round to Inf or NaN, or overflow a Q8_0 block scale): an export never writes a
// model that computes NaN.
void require_representable(const MergedTensor& m, DType dtype);

// llama.cpp's convert_hf_to_gguf permutation of q/k rows (HF -> GGUF) for `heads` heads of `HD`
// rows each, applied to a row-major (heads*HD, cols) matrix; see io/checkpoint_gguf.cpp.
std::vector<double> permute_rows_hf_to_gguf(const std::vector<double>& m, int64_t heads,
                                            int64_t HD, int64_t cols);

}  // namespace medtune::model
