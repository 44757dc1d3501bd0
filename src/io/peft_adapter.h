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
  // Read from adapter_config.json to decide which modules PEFT adapts (peft_adapts_module);
  // write_peft_adapter writes them as null (see there).
  //  layers_to_transform: the decoder layers PEFT adapts; empty: every layer (PEFT's null or []).
  //    PEFT's single-integer form is held as a one-element list (same rule: == vs in).
  //  layers_pattern: the name component that precedes the layer index, "layers" in
  //    "model.layers.3.self_attn.q_proj"; empty: PEFT's default (any component followed by a
  //    number). Only used with layers_to_transform.
  //  exclude_modules: modules PEFT never adapts, matched like target_modules (list form only).
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;
  std::vector<std::string> exclude_modules;
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
// BadInput naming the file and the field or tensor: peft_type other than LORA, task_type other
// than CAUSAL_LM (or null), lora_alpha <= 0, rank_pattern / alpha_pattern, bias other than
// "none", fan_in_fan_out, DoRA, lora_bias, modules_to_save, target_modules or exclude_modules
// given as a regex string, a layers_pattern other than "layers" (the name Llama-family models give
// their decoder layers), an init_lora_weights mode that rewrites the base weights (PiSSA, OLoRA,
// LoftQ, CorDA), unknown or unpaired tensors, a tensor for a module PEFT would not adapt under the
// config (target_modules, exclude_modules, layers_to_transform: PEFT would silently drop it), and
// ranks that disagree with the config. Only adapter_model.bin (pickle) present -> BadInput saying
// how to convert it.
PeftAdapter read_peft_adapter(const std::string& dir);

// The adapter_config.json part of read_peft_adapter: parses and checks `config_path` alone.
LoraSpec read_peft_adapter_config(const std::string& config_path);

// Whether PEFT puts a LoRA layer on `module` (an HF module path, "model.layers.3.self_attn.q_proj")
// under `spec`: peft.tuners.tuners_utils.check_target_module_exists for the forms medtune accepts
// (target_modules and exclude_modules as lists of names, layers_to_transform, layers_pattern).
bool peft_adapts_module(const LoraSpec& spec, const std::string& module);

// Writes what PEFT 0.21's save_pretrained writes for a LoRA adapter on a causal LM: the same
// adapter_config.json fields (sorted keys, 2-space indent, no trailing newline) and F32 tensors
// named "base_model.model.<module>.lora_A.weight" / ".lora_B.weight", with safetensors metadata
// {"format": "pt"} added unless the caller sets "format". layers_to_transform, layers_pattern and
// exclude_modules are written as null whatever the spec holds: PEFT then loads every pair written,
// and a targeted module without a pair keeps B = 0 (init_lora_weights true), so the written adapter
// computes what `adapter` computes. Creates `dir` if needed; each file is
// replaced atomically (io/atomic_file.h). Throws Internal if `adapter` is inconsistent (sizes,
// ranks, duplicate modules): that is a bug in the caller, not bad user input.
void write_peft_adapter(const std::string& dir, const PeftAdapter& adapter,
                        const std::map<std::string, std::string>& safetensors_metadata);

// The adapter_config.json text write_peft_adapter writes (exposed for tests).
std::string peft_adapter_config_json(const LoraSpec& spec);

}  // namespace medtune::io
