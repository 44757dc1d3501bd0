// A Llama-family model's weights as the forward pass uses them: large matrices stay in the
// checkpoint mapping in their stored dtype; small vectors (norms, biases) are widened to fp32.
#pragma once

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

struct ModelWeights {
  ops::StoredMatrix embed;    // (V, C)
  ops::StoredMatrix lm_head;  // (V, C); the same bytes as `embed` when tied
  std::vector<float> final_norm;  // (C)
  std::vector<LayerWeights> layers;
  // llama.cpp's GGUF converter stores q/k rows permuted for its interleaved rope; when set, the
  // forward pass de-interleaves q and k after projecting (see undo_gguf_qk_permutation).
  bool qk_rows_permuted = false;
};

// Views into `ckpt` (which must outlive the result). Throws BadInput for unsupported dtypes.
ModelWeights bind_weights(const io::Checkpoint& ckpt);

// Row r of a GGUF-permuted q/k projection output is HF row perm(r):
//   GGUF: head h, pair i, half j at h*HD + 2*i + j   <->   HF: h*HD + j*(HD/2) + i.
// x: (N, H, HD), rewritten in place from GGUF order into Hugging Face order.
void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD);

}  // namespace medtune::model
