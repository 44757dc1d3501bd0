#include "model/weights.h"

#include <string>

#include "core/error.h"
#include "core/quant.h"

namespace medtune::model {

namespace {

const RawTensor& find(const io::Checkpoint& ckpt, const std::string& name) {
  auto it = ckpt.tensors.find(name);
  if (it == ckpt.tensors.end()) throw BadInput(ckpt.path + ": missing tensor '" + name + "'");
  return it->second;
}

bool is_matrix_dtype(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q4_K: case DType::Q6_K: return true;
    default: return false;
  }
}

ops::StoredMatrix matrix(const io::Checkpoint& ckpt, const std::string& name) {
  const RawTensor& t = find(ckpt, name);
  if (t.shape.size() != 2) throw BadInput(ckpt.path + ": tensor '" + name + "' is not a matrix");
  if (!is_matrix_dtype(t.dtype))
    throw BadInput(ckpt.path + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                   ", which medtune cannot use as a weight (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K)");
  if (t.shape[1] % dtype_block_elems(t.dtype) != 0)
    throw BadInput(ckpt.path + ": tensor '" + name + "' rows are not whole quantization blocks");
  return ops::StoredMatrix{t.dtype, t.shape[0], t.shape[1], t.data};
}

std::vector<float> vector_f32(const io::Checkpoint& ckpt, const std::string& name) {
  const RawTensor& t = find(ckpt, name);
  if (t.shape.size() != 1) throw BadInput(ckpt.path + ": tensor '" + name + "' is not a vector");
  if (!is_matrix_dtype(t.dtype))
    throw BadInput(ckpt.path + ": tensor '" + name + "' has unsupported dtype " +
                   std::string(dtype_name(t.dtype)));
  std::vector<float> out(static_cast<size_t>(t.shape[0]));
  dequantize_row(t.dtype, t.data, out.data(), t.shape[0]);
  return out;
}

}  // namespace

ModelWeights bind_weights(const io::Checkpoint& ckpt) {
  const ModelConfig& c = ckpt.config;
  ModelWeights w;
  w.embed = matrix(ckpt, "model.embed_tokens.weight");
  w.lm_head = ckpt.tensors.count("lm_head.weight") ? matrix(ckpt, "lm_head.weight") : w.embed;
  w.final_norm = vector_f32(ckpt, "model.norm.weight");
  w.qk_rows_permuted = ckpt.qk_rows_permuted;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.input_norm = vector_f32(ckpt, p + "input_layernorm.weight");
    lw.post_attn_norm = vector_f32(ckpt, p + "post_attention_layernorm.weight");
    lw.q = matrix(ckpt, p + "self_attn.q_proj.weight");
    lw.k = matrix(ckpt, p + "self_attn.k_proj.weight");
    lw.v = matrix(ckpt, p + "self_attn.v_proj.weight");
    lw.o = matrix(ckpt, p + "self_attn.o_proj.weight");
    if (c.attention_bias) {
      lw.q_bias = vector_f32(ckpt, p + "self_attn.q_proj.bias");
      lw.k_bias = vector_f32(ckpt, p + "self_attn.k_proj.bias");
      lw.v_bias = vector_f32(ckpt, p + "self_attn.v_proj.bias");
    }
    // transformers' LlamaAttention gives o_proj a bias too when attention_bias is set; Qwen2's
    // has none. open_checkpoint already checked which the architecture requires.
    if (ckpt.tensors.count(p + "self_attn.o_proj.bias") != 0)
      lw.o_bias = vector_f32(ckpt, p + "self_attn.o_proj.bias");
    lw.gate = matrix(ckpt, p + "mlp.gate_proj.weight");
    lw.up = matrix(ckpt, p + "mlp.up_proj.weight");
    lw.down = matrix(ckpt, p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(lw));
  }
  return w;
}

void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) {
  const int64_t half = HD / 2;
  std::vector<float> tmp(static_cast<size_t>(HD));
  for (int64_t nh = 0; nh < N * H; ++nh) {
    float* head = x + nh * HD;
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) tmp[static_cast<size_t>(j * half + i)] = head[2 * i + j];
    for (int64_t d = 0; d < HD; ++d) head[d] = tmp[static_cast<size_t>(d)];
  }
}

}  // namespace medtune::model
