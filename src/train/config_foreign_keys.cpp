#include "train/config_foreign_keys.h"

#include <map>

namespace medtune::train::config {
namespace {

constexpr std::string_view kPrecision =
    "medtune's key is 'precision' (fp32 | bf16 | auto: fp32 on the CPU, bf16 on GPUs)";
constexpr std::string_view kAttention =
    "medtune's attention kernels are its own; the math is the same";
constexpr std::string_view kTracker =
    "medtune logs to the run directory, not to an experiment tracker";
constexpr std::string_view kHub = "medtune does not talk to the Hugging Face Hub";
constexpr std::string_view kArch =
    "medtune reads the architecture and tokenizer from the checkpoint";
constexpr std::string_view kSchedule =
    "medtune's lr schedules have no such option; it would change the result";
// TRL / transformers names people bring along, which edit distance alone would not match.
const std::map<std::string_view, std::string_view>& aliases() {
  static const std::map<std::string_view, std::string_view> m = {
      {"model_name_or_path", "base_model"},
      {"per_device_train_batch_size", "micro_batch_size"},
      {"batch_size", "micro_batch_size"},
      {"num_train_epochs", "num_epochs"},
      {"epochs", "num_epochs"},
      {"max_seq_length", "sequence_len"},
      {"lr", "learning_rate"},
      {"lr_scheduler_type", "lr_scheduler"},
      {"target_modules", "lora_target_modules"},
      {"r", "lora_r"},
  };
  return m;
}

}  // namespace

const std::vector<ForeignKey>& foreign_keys() {
  static const std::vector<ForeignKey> keys = {
      {"bf16", Effect::kWarn, kPrecision},
      {"fp16", Effect::kWarn, kPrecision},
      {"tf32", Effect::kWarn, kPrecision},
      {"flash_attention", Effect::kWarn, kAttention},
      {"xformers_attention", Effect::kWarn, kAttention},
      {"sdp_attention", Effect::kWarn, kAttention},
      {"flash_attn_cross_entropy", Effect::kWarn, kAttention},
      {"flash_attn_rms_norm", Effect::kWarn, kAttention},
      {"flash_attn_fuse_qkv", Effect::kWarn, kAttention},
      {"flash_attn_fuse_mlp", Effect::kWarn, kAttention},
      {"torch_compile", Effect::kWarn, "medtune is compiled C++"},
      {"wandb_project", Effect::kWarn, kTracker},
      {"wandb_entity", Effect::kWarn, kTracker},
      {"wandb_watch", Effect::kWarn, kTracker},
      {"wandb_name", Effect::kWarn, kTracker},
      {"wandb_run_id", Effect::kWarn, kTracker},
      {"wandb_log_model", Effect::kWarn, kTracker},
      {"wandb_mode", Effect::kWarn, kTracker},
      {"mlflow_tracking_uri", Effect::kWarn, kTracker},
      {"mlflow_experiment_name", Effect::kWarn, kTracker},
      {"hub_model_id", Effect::kWarn, kHub},
      {"hub_strategy", Effect::kWarn, kHub},
      {"push_dataset_to_hub", Effect::kWarn, kHub},
      {"hf_use_auth_token", Effect::kWarn, kHub},
      {"model_type", Effect::kWarn, kArch},
      {"tokenizer_type", Effect::kWarn, kArch},
      {"is_llama_derived_model", Effect::kWarn, kArch},
      {"trust_remote_code", Effect::kWarn, kArch},
      {"dataset_prepared_path", Effect::kWarn, "medtune tokenizes in memory and caches nothing"},
      {"pad_to_sequence_len", Effect::kWarn,
       "padding is masked out of the loss: it changes speed, not results"},
      {"eval_sample_packing", Effect::kWarn, "medtune evaluates without packing"},
      {"eval_batch_size", Effect::kWarn,
       "medtune evaluates with micro_batch_size; scores do not depend on it"},
      {"evals_per_epoch", Effect::kWarn, "use eval_steps"},
      {"saves_per_epoch", Effect::kWarn, "use save_steps"},
      {"eval_table_size", Effect::kWarn, "medtune's eval report is its own"},
      {"save_safetensors", Effect::kWarn, "adapters are always written as safetensors"},
      {"gradient_checkpointing_kwargs", Effect::kWarn, "medtune's recomputation has no options"},
      {"dataloader_num_workers", Effect::kWarn, "medtune loads data in-process"},
      {"dataloader_pin_memory", Effect::kWarn, "medtune loads data in-process"},
      {"dataloader_prefetch_factor", Effect::kWarn, "medtune loads data in-process"},
      {"strict", Effect::kWarn, "medtune is always strict about keys"},
      {"debug", Effect::kWarn, "no meaning in medtune"},
      {"local_rank", Effect::kWarn, "ranks come from the launcher"},
      {"deepspeed", Effect::kReject, "DeepSpeed shards training through PyTorch"},
      {"fsdp", Effect::kReject, "FSDP shards training through PyTorch"},
      {"fsdp_config", Effect::kReject, "FSDP shards training through PyTorch"},
      {"load_in_8bit", Effect::kReject,
       "8-bit (LLM.int8) base weights; adapter: qlora gives a 4-bit NF4 base"},
      {"gptq", Effect::kReject, "GPTQ-quantized bases"},
      {"special_tokens", Effect::kReject, "it changes the tokenizer"},
      {"tokens", Effect::kReject, "it adds tokens to the tokenizer"},
      {"chat_template", Effect::kReject,
       "chat is rendered with the model's own template (see prompt_format)"},
      {"lora_modules_to_save", Effect::kReject, "it trains full embedding or head weights"},
      {"lora_fan_in_fan_out", Effect::kReject, "it is for GPT-2 style Conv1D layers"},
      {"lora_model_dir", Effect::kReject, "continuing from an adapter: use resume_from_checkpoint"},
      {"peft_use_dora", Effect::kReject, "DoRA adapters"},
      {"loraplus_lr_ratio", Effect::kReject, "LoRA+ learning rates"},
      {"loraplus_lr_embedding", Effect::kReject, "LoRA+ learning rates"},
      {"neftune_noise_alpha", Effect::kReject, "it adds noise to the embeddings"},
      {"noisy_embedding_alpha", Effect::kReject, "it adds noise to the embeddings"},
      {"rope_scaling", Effect::kReject, "it changes the model's positions"},
      {"rope_theta", Effect::kReject, "it changes the model's positions"},
      {"unfrozen_parameters", Effect::kReject, "it trains base weights"},
      {"relora_steps", Effect::kReject, "ReLoRA restarts"},
      {"early_stopping_patience", Effect::kReject, "it would stop training early"},
      {"lr_scheduler_kwargs", Effect::kReject, kSchedule},
      {"lr_quadratic_warmup", Effect::kReject, kSchedule},
      {"cosine_min_lr_ratio", Effect::kReject, kSchedule},
      {"cosine_constant_lr_ratio", Effect::kReject, kSchedule},
      {"rl", Effect::kReject, "medtune does supervised fine-tuning only"},
  };
  return keys;
}

std::string unknown_key_message(const std::string& key, std::vector<std::string_view> known) {
  std::string msg = "unknown key '" + key + "'";
  std::string guess;
  if (const auto it = aliases().find(key); it != aliases().end()) {
    guess = std::string(it->second);
  } else {
    guess = closest(key, known);
    if (guess.empty()) {
      std::vector<std::string_view> foreign;
      for (const ForeignKey& k : foreign_keys()) foreign.push_back(k.name);
      guess = closest(key, foreign);
    }
  }
  if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
  return msg + " (docs/configuration.md lists every key)";
}

void check_optimizer(const Entry& e, std::vector<std::string>& warnings) {
  const std::string name = read_string(e, e.value);
  if (name == "adamw_torch") return;
  if (name == "adamw_torch_fused" || name == "adamw_hf" || name == "paged_adamw_32bit") {
    warnings.push_back(e.where() + ": optimizer '" + name +
                       "' runs as adamw_torch (the same fp32 AdamW update)");
    return;
  }
  fail_at(e.where(),
          "optimizer '" + name +
              "' is not supported by medtune (its optimizer is AdamW in fp32: adamw_torch)");
}

}  // namespace medtune::train::config
