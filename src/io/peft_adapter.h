// Hugging Face PEFT LoRA adapters: the directory PeftModel.save_pretrained writes and
// PeftModel.from_pretrained loads (adapter_config.json + adapter_model.safetensors).
//
// A LoRA module replaces y = W x with y = W x + scaling * B (A x), A: (r, in), B: (out, r),
// scaling = lora_alpha / r (or lora_alpha / sqrt(r) with use_rslora).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace medtune::io {

struct LoraSpec {
  int64_t r = 0;
  double alpha = 0.0;    // lora_alpha
  double dropout = 0.0;  // lora_dropout (training only)
  bool use_rslora = false;
  std::vector<std::string> target_modules;  // module name suffixes: "q_proj", "down_proj", ...
  std::string base_model_name_or_path;      // "" is written as null
};

struct LoraTensorPair {
  std::string module;  // HF module path, e.g. "model.layers.0.self_attn.q_proj"
  std::vector<float> A;  // lora_A.weight (r, in)
  int64_t r = 0, in = 0;
  std::vector<float> B;  // lora_B.weight (out, r)
  int64_t out = 0;
};

struct PeftAdapter {
  LoraSpec spec;
  std::vector<LoraTensorPair> pairs;  // read_peft_adapter returns them sorted by module name
  double scaling() const;             // alpha / r, or alpha / sqrt(r) with use_rslora
};

// Reads `dir`/adapter_config.json and `dir`/adapter_model.safetensors. F32, F16 and BF16 tensors
// are widened to fp32. Anything PEFT would compute differently from plain LoRA is refused with
// BadInput naming the file and the field or tensor: peft_type other than LORA, rank_pattern /
// alpha_pattern, bias other than "none", fan_in_fan_out, DoRA, lora_bias, modules_to_save,
// target_modules given as a regex string, an init_lora_weights mode that rewrites the base
// weights (PiSSA, OLoRA, LoftQ, CorDA), unknown or unpaired tensors, and ranks that disagree with
// the config. Only adapter_model.bin (pickle) present -> BadInput saying how to convert it.
PeftAdapter read_peft_adapter(const std::string& dir);

// Writes what PEFT 0.21's save_pretrained writes for a LoRA adapter on a causal LM: the same
// adapter_config.json fields (sorted keys, 2-space indent, no trailing newline) and F32 tensors
// named "base_model.model.<module>.lora_A.weight" / ".lora_B.weight", with safetensors metadata
// {"format": "pt"} added unless the caller sets "format". Creates `dir` if needed; each file is
// replaced atomically (io/atomic_file.h). Throws Internal if `adapter` is inconsistent (sizes,
// ranks, duplicate modules): that is a bug in the caller, not bad user input.
void write_peft_adapter(const std::string& dir, const PeftAdapter& adapter,
                        const std::map<std::string, std::string>& safetensors_metadata);

// The adapter_config.json text write_peft_adapter writes (exposed for tests).
std::string peft_adapter_config_json(const LoraSpec& spec);

}  // namespace medtune::io
