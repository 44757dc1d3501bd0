// `medtune export gguf` and `medtune export gguf-lora`: the merged model, or the adapter alone,
// in the GGUF layouts llama.cpp loads (convert_hf_to_gguf.py / convert_lora_to_gguf.py).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "io/gguf_writer.h"
#include "model/lora.h"

namespace medtune::model {

// HF tensor name -> llama.cpp name ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight").
// Throws Internal for a name it does not know.
std::string gguf_tensor_name(const std::string& hf_name);

// The architecture name llama.cpp uses for `c` ("llama" for llama and mistral, "qwen2"), and
// whether its converter permutes q/k rows for it (llama, mistral: yes; qwen2: no).
std::string gguf_architecture(const ModelConfig& c);
bool gguf_permutes_qk(const ModelConfig& c);

struct GgufExportReport {
  std::vector<std::string> notes;
};

// The merged model as GGUF. type: F32, F16 or Q8_0 for 2-D weights (a weight whose rows are not
// whole Q8_0 blocks falls back to F16, as convert_hf_to_gguf does); 1-D tensors (norms, biases)
// F32. llama3 rope scaling is written as llama.cpp's rope_freqs.weight.
// Metadata: from a GGUF source, its keys in order (general.file_type replaced, general.alignment
// dropped); from a Hugging Face directory, the llama.cpp hyper-parameter keys built from the
// config, then `tokenizer` (tokenizer/gguf_metadata.h) or, when it is null,
// tokenizer.ggml.model = "none" (llama.cpp then runs on token ids).
GgufExportReport export_merged_gguf(const io::Checkpoint& ckpt, const LoraWeights* lora,
                                    const std::string& out_path, DType type,
                                    const io::GgufMetadata* tokenizer = nullptr);

// The adapter alone in llama.cpp's LoRA GGUF: general.type=adapter, adapter.type=lora,
// adapter.lora.alpha = scaling * r (llama.cpp scales by alpha / r, so rsLoRA's alpha / sqrt(r)
// is carried through an effective alpha; every module must then share one rank),
// blk.N.<name>.weight.lora_a (r, in) and .lora_b (out, r) in F32, lora_b rows of q/k permuted
// as the base's weights are. `base` supplies the architecture and head layout.
GgufExportReport export_lora_gguf(const io::Checkpoint& base, const LoraWeights& lora,
                                  const std::string& out_path);

}  // namespace medtune::model
