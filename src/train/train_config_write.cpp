// A training config written back resolved, every key explicit (to_json, to_yaml): the run
// directory's config.yaml and the identity a resume compares.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/std_regex.h"
#include "train/config_names.h"
#include "train/config_value.h"
#include "train/train_config.h"

namespace medtune::train {

using namespace config;  // the readers and names shared with train_config.cpp

namespace {

// Shortest text that reads back as the same double ("0.0002", "1e-08", "16").
std::string number_text(double x) {
  std::array<char, 32> buf{};
  const auto [ptr, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  if (ec != std::errc()) throw Internal("train_config: cannot format a number");
  return std::string(buf.data(), ptr);
}

std::vector<std::string> target_names(const TrainConfig& c) {
  std::vector<std::string> out;
  for (const model::Proj p : c.lora_target_modules) out.emplace_back(model::proj_name(p));
  return out;
}

// The resolved settings in the order docs/configuration.md groups them; to_json and to_yaml both
// come from here, so a key added once appears in both.
nlohmann::ordered_json resolved(const TrainConfig& c) {
  using nlohmann::ordered_json;
  auto datasets = [](const std::vector<DatasetSpec>& ds) {
    ordered_json out = ordered_json::array();
    const DatasetSpec defaults;
    for (const DatasetSpec& d : ds) {
      ordered_json j{{"path", d.path}, {"type", dataset_type_name(d.type)}};
      // The axolotl keys only where set, so that the resolved config (and a run's identity) of
      // a medqa or chat dataset is what it was before these keys existed.
      for (const auto& key : kDatasetKeys)
        if (d.*key.field != defaults.*key.field) j[std::string(key.name)] = d.*key.field;
      if (d.type == DatasetType::kChatTemplate) {
        j["roles_to_train"] = d.roles_to_train;
        j["train_on_eos"] = d.train_on_eos;
      }
      if (d.cop_base >= 0) j["cop_base"] = std::to_string(d.cop_base);
      out.push_back(std::move(j));
    }
    return out;
  };
  auto optional = [](const std::string& s) { return s.empty() ? ordered_json() : ordered_json(s); };
  ordered_json j;
  j["base_model"] = c.base_model;
  j["adapter"] = adapter_name(c.adapter);
  j["load_in_4bit"] = c.load_in_4bit;
  j["base_quant"] = base_quant_name(c.base_quant);
  j["lora_r"] = c.lora_r;
  j["lora_alpha"] = c.lora_alpha;
  j["lora_dropout"] = c.lora_dropout;
  j["lora_target_modules"] = target_names(c);
  j["peft_use_rslora"] = c.peft_use_rslora;
  j["datasets"] = datasets(c.datasets);
  j["test_datasets"] = datasets(c.test_datasets);
  j["val_set_size"] =
      c.val_set_count > 0 ? ordered_json(c.val_set_count) : ordered_json(c.val_set_fraction);
  j["sequence_len"] = c.sequence_len;
  j["sample_packing"] = c.sample_packing;
  j["group_by_length"] = c.group_by_length;
  j["train_on_inputs"] = c.train_on_inputs;
  j["skip_invalid"] = c.skip_invalid;
  j["prompt_format"] = prompt_format_name(c.prompt_format);
  j["system_prompt"] = c.system_prompt;
  j["answer_target"] = answer_target_name(c.answer_target);
  j["micro_batch_size"] = c.micro_batch_size;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["num_epochs"] = c.num_epochs;
  j["max_steps"] = c.max_steps;
  j["learning_rate"] = c.learning_rate;
  j["lr_scheduler"] = name_of(c.lr_scheduler, kSchedulers);
  if (c.warmup_ratio)
    j["warmup_ratio"] = *c.warmup_ratio;
  else
    j["warmup_steps"] = c.warmup_steps;
  j["weight_decay"] = c.weight_decay;
  j["adam_beta1"] = c.adam_beta1;
  j["adam_beta2"] = c.adam_beta2;
  j["adam_epsilon"] = c.adam_epsilon;
  j["max_grad_norm"] = c.max_grad_norm;
  j["skip_nonfinite_steps"] = c.skip_nonfinite_steps;
  j["gradient_checkpointing"] = c.gradient_checkpointing;
  j["seed"] = c.seed;
  j["output_dir"] = c.output_dir;
  j["save_steps"] = c.save_steps;
  j["save_total_limit"] = c.save_total_limit;
  j["eval_steps"] = c.eval_steps;
  j["logging_steps"] = c.logging_steps;
  j["report_to"] = c.report_to_tensorboard ? "tensorboard" : "none";
  j["logging_dir"] = optional(c.logging_dir);
  j["num_threads"] = c.num_threads;
  j["device"] = c.device;
  j["precision"] = c.precision;
  j["bf16_weight_copy"] = c.bf16_weight_copy;
  j["max_device_memory"] =
      c.max_device_memory > 0 ? format_memory_size(c.max_device_memory) : "auto";
  j["max_runtime"] = optional(c.max_runtime_s > 0 ? std::to_string(c.max_runtime_s) + "s" : "");
  j["ddp_timeout"] = c.ddp_timeout_s > 0 ? ordered_json(c.ddp_timeout_s) : ordered_json(nullptr);
  j["ddp_reduction"] = c.ddp_reduction;
  j["resume_from_checkpoint"] = optional(c.resume_from_checkpoint);
  return j;
}

// A name like `cosine` or `q_proj` is written plain; anything else (paths, prompts, and words YAML
// would read as something else) double-quoted.
bool plain_word(const std::string& s) {
  static const std::regex kWord("[a-z][a-z0-9_]*");
  static const std::regex kYamlWord("y|n|yes|no|on|off|true|false|null");
  return s.size() <= kMaxRegexText && std::regex_match(s, kWord) && !std::regex_match(s, kYamlWord);
}

void emit(YAML::Emitter& out, const nlohmann::ordered_json& v) {
  using nlohmann::ordered_json;
  switch (v.type()) {
    case ordered_json::value_t::null:
      out << YAML::Null;
      break;
    case ordered_json::value_t::boolean:
      out << (v.get<bool>() ? "true" : "false");
      break;
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned:
      out << std::to_string(v.get<int64_t>());
      break;
    case ordered_json::value_t::number_float:
      out << number_text(v.get<double>());
      break;
    case ordered_json::value_t::string: {
      const std::string s = v.get<std::string>();
      if (plain_word(s))
        out << s;
      else
        out << YAML::DoubleQuoted << s;
      break;
    }
    case ordered_json::value_t::array: {
      const bool flat =
          std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_primitive(); });
      out << (flat ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const auto& x : v) emit(out, x);
      out << YAML::EndSeq;
      break;
    }
    case ordered_json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, x] : v.items()) {
        out << YAML::Key << k << YAML::Value;
        emit(out, x);
      }
      out << YAML::EndMap;
      break;
    default:
      throw Internal("train_config: unexpected JSON value");
  }
}

}  // namespace

nlohmann::json to_json(const TrainConfig& c) {
  return nlohmann::json(resolved(c));
}

std::string to_yaml(const TrainConfig& c) {
  YAML::Emitter out;
  out << YAML::Comment("medtune train config, resolved (every key explicit; paths absolute)");
  emit(out, resolved(c));
  if (!out.good()) throw Internal("train_config: YAML emitter: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace medtune::train
