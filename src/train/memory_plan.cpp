#include "train/memory_plan.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/inference_plan.h"
#include "model/row_shards.h"
#include "model/train_step.h"
#include "ops/linear.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int64_t checkpoint_bytes(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<int64_t>(fs::file_size(path, ec));
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size(ec));
  return total;
}

MemoryPlan plan_memory(const TrainConfig& cfg, const ModelConfig& c, const model::LoraWeights& lora,
                       int64_t weight_bytes, int64_t nf4_bytes, bool qk_rows_permuted,
                       int64_t device_passes) {
  MemoryPlan m;
  const double f = 4.0;  // bytes per fp32
  m.on_device = cfg.device != "cpu";
  // A device runs a micro-batch in passes of at most pass_rows rows (model::TrainOptions::
  // device_passes): what a pass holds is what a micro-batch of pass_rows rows would.
  m.device_passes = m.on_device ? std::clamp<int64_t>(device_passes, 1, cfg.micro_batch_size) : 1;
  m.pass_rows = (cfg.micro_batch_size + m.device_passes - 1) / m.device_passes;
  const double N = static_cast<double>(m.pass_rows) * static_cast<double>(cfg.sequence_len);
  const auto kvdim = static_cast<double>(c.num_key_value_heads * c.head_dim);
  m.mapped = static_cast<double>(weight_bytes);
  m.nf4 = static_cast<double>(nf4_bytes);
  // Keys and values (training: Smax = T) of every layer, or with checkpointing of the one layer
  // whose forward was recomputed for its backward (model/train_step.cpp).
  const double kv_layers =
      cfg.gradient_checkpointing ? 1.0 : static_cast<double>(c.num_hidden_layers);
  m.kv = kv_layers * N * f * 2 * kvdim;
  const int64_t tokens = m.pass_rows * cfg.sequence_len;
  // The activations kept, and the pass's temporaries beside them (model/row_shards.h).
  const model::PassScratch scratch =
      model::planned_pass_scratch(c, lora, tokens, cfg.lora_dropout > 0, qk_rows_permuted);
  const double temporaries = scratch.held + scratch.layer;
  m.acts_full = model::planned_activation_bytes(c, lora, tokens, false) + temporaries;
  m.acts_ckpt = model::planned_activation_bytes(c, lora, tokens, true) + temporaries;
  m.params = static_cast<double>(lora.num_parameters()) * f;
  m.acts = cfg.gradient_checkpointing ? m.acts_ckpt : m.acts_full;
  // Row shards (model/row_shards.h): each shard past the first holds an adapter copy.
  m.threads = cfg.num_threads > 0 ? static_cast<int>(cfg.num_threads) : omp_get_max_threads();
  model::TrainOptions step_opt;
  step_opt.gradient_checkpointing = cfg.gradient_checkpointing;
  m.shards =
      model::row_shards_for(c, lora, cfg.micro_batch_size, cfg.sequence_len, step_opt, m.threads);
  m.copies = static_cast<double>(m.shards - 1) * model::shard_copy_bytes(lora);
  if (m.on_device) {
    m.shards = 1;  // row shards are a CPU policy
    m.copies = 0;
    m.device_weights = m.mapped + m.nf4;
    m.device_adapter_copies = cfg.gradient_accumulation_steps > 1 ? 5 : 4;
    // The attention's logsumexp per layer kept (or per recomputed layer with checkpointing).
    const double lse = N * f * static_cast<double>(c.num_attention_heads) *
                       (cfg.gradient_checkpointing ? 1.0 : static_cast<double>(c.num_hidden_layers));
    // A layer's temporaries are freed before the loss head, whose chunk (train_step.cpp: logits
    // (256, V), its rows' x, h, dh, dx (256, C)) takes their place: the larger of the two.
    const double C = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
    const double F = static_cast<double>(c.intermediate_size);
    const double QD = static_cast<double>(c.num_attention_heads * c.head_dim);
    const double loss_rows = static_cast<double>(std::min<int64_t>(256, tokens));
    const double loss_chunk = f * loss_rows * (V + 4 * C + 1);
    m.device_acts = m.acts - scratch.layer + std::max(scratch.layer, loss_chunk) + lse;
    const backend::Device device = backend::parse_device(cfg.device, "device");
    m.device_precision = backend::parse_precision(cfg.precision, device, "precision");
    // With bf16 GEMMs the loss head's backward rounds its logits' gradient (256, V) to bf16 in
    // the buffer that holds the layers' rounded inputs (the larger of the two stays).
    const bool bf16 = m.device_precision == backend::Precision::kBf16;
    const double loss_bf16 = 2 * loss_rows * V;
    const double acts_bf16 = 2 * static_cast<double>(tokens) * std::max({F, C, QD});
    const double loss_extra = bf16 ? std::max(0.0, loss_bf16 - acts_bf16) : 0.0;
    m.device_workspace =
        model::device_workspace_bytes(c, tokens, m.device_precision) + loss_extra +
        model::device_attention_workspace_bytes(c, m.pass_rows, cfg.sequence_len,
                                                cfg.sequence_len, /*backward=*/true);
  }
  return m;
}

double device_memory_limit(const TrainConfig& cfg, double free_bytes) {
  if (cfg.max_device_memory <= 0) return std::max(0.0, free_bytes);
  return free_bytes > 0 ? std::min(cfg.max_device_memory, free_bytes) : cfg.max_device_memory;
}

MemoryPlan plan_device_passes(const TrainConfig& cfg, const ModelConfig& c,
                              const model::LoraWeights& lora, int64_t weight_bytes,
                              int64_t nf4_bytes, bool qk_rows_permuted, double limit) {
  MemoryPlan m = plan_memory(cfg, c, lora, weight_bytes, nf4_bytes, qk_rows_permuted, 1);
  if (!m.on_device || limit <= 0) return m;
  // P passes of ceil(B / P) rows: only the counts that shorten a pass are tried.
  for (int64_t passes = 2; passes <= cfg.micro_batch_size && m.device_total() > limit; ++passes)
    if ((cfg.micro_batch_size + passes - 1) / passes < m.pass_rows)
      m = plan_memory(cfg, c, lora, weight_bytes, nf4_bytes, qk_rows_permuted, passes);
  return m;
}

void settle_bf16_copy(const TrainConfig& cfg, MemoryPlan& m, double copy_bytes,
                      double available) {
  m.bf16_copy = 0;
  const bool read = !m.on_device &&
                    backend::parse_precision(cfg.precision, backend::Device{}, "precision") ==
                        backend::Precision::kBf16 &&
                    ops::bf16_kernel() == ops::Bf16Kernel::kOneDnn;
  if (!read || cfg.bf16_weight_copy == "false" || copy_bytes <= 0) return;
  if (cfg.bf16_weight_copy == "auto" && available > 0 && m.owned() + copy_bytes > available / 2)
    return;
  m.bf16_copy = copy_bytes;
}

std::string format_memory_plan(const TrainConfig& cfg, const MemoryPlan& m) {
  std::ostringstream out;
  out << "memory plan (fp32 CPU; micro_batch_size " << cfg.micro_batch_size << " x sequence_len "
      << cfg.sequence_len << "):\n"
      << "  base weights (mapped, file)  " << mib(m.mapped) << "\n"
      << (m.nf4 > 0 ? "  base linears, NF4 (owned)    " + mib(m.nf4) +
                          " (bitsandbytes NF4, 4.5 bits/weight as held)\n"
                    : std::string())
      << "  LoRA parameters              " << mib(m.params) << "\n"
      << "  LoRA gradients               " << mib(m.params) << "\n"
      << "  AdamW moments (m, v)         " << mib(2 * m.params) << "\n"
      << "  activations                  " << mib(m.acts)
      << (cfg.gradient_checkpointing ? " (checkpointing on; off: " + mib(m.acts_full) + ")"
                                     : " (checkpointing off; on: " + mib(m.acts_ckpt) + ")")
      << "\n"
      << "  keys/values                  " << mib(m.kv) << "\n"
      << (m.bf16_copy > 0 ? "  base linears, bf16 copy      " + mib(m.bf16_copy) +
                                " (bf16_weight_copy: " + cfg.bf16_weight_copy + ")\n"
                          : std::string())
      << "  row shards                   " << m.shards << " on " << m.threads << " threads"
      << (m.shards > 1 ? ", adapter copies " + mib(m.copies) : std::string()) << "\n"
      << "  total (excluding the loss head's logits chunk) " << mib(m.total()) << "\n";
  if (m.on_device)
    out << "device " << cfg.device << " memory plan (" << backend::precision_name(m.device_precision)
        << " GEMMs; the optimizer step runs there):\n"
        << "  base weights (resident, stored dtype) " << mib(m.device_weights) << "\n"
        << "  LoRA A, B + gradients (step" << (m.device_adapter_copies > 4 ? ", pass" : "")
        << ") + AdamW m, v " << mib(m.device_adapter()) << "\n"
        << "  activations and temporaries  " << mib(m.device_acts) << "\n"
        << "  keys/values                  " << mib(m.kv) << "\n"
        << "  workspace                    " << mib(m.device_workspace)
        << " (a dequantized weight chunk"
        << (m.device_precision == backend::Precision::kBf16 ? " and the GEMMs' bf16 inputs" : "")
        << ", the attention's scores, staged indices)\n"
        << (m.device_passes > 1 ? "  passes                       a micro-batch of " +
                                      std::to_string(cfg.micro_batch_size) + " rows in " +
                                      std::to_string(m.device_passes) + " passes of at most " +
                                      std::to_string(m.pass_rows) + " (max_device_memory)\n"
                                : std::string())
        << "  device total                 " << mib(m.device_total()) << " (max_device_memory "
        << (cfg.max_device_memory > 0
                ? format_memory_size(cfg.max_device_memory)
                : std::string("auto: passes chosen at start, within the free memory"))
        << (cfg.max_device_memory > 0 && m.device_total() > cfg.max_device_memory
                ? ": over it even in passes of one row, so the run is refused"
                : "")
        << ")\n"
        << "  host: copies of LoRA A, B + gradients + AdamW moments " << mib(4 * m.params)
        << (m.nf4 > 0 ? ", NF4 base " + mib(m.nf4) : std::string()) << "\n";
  return out.str();
}

// MemAvailable from /proc/meminfo in bytes (0 when unknown).
double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

// A plan that cannot fit is refused with its numbers before anything is allocated, instead of a
// std::bad_alloc (exit 1) or the kernel's OOM killer minutes into the run.
void refuse_if_too_large_on_device(const TrainConfig& cfg, const MemoryPlan& m, double free_bytes) {
  const double limit = device_memory_limit(cfg, free_bytes);
  if (!m.on_device || limit <= 0 || m.device_total() <= limit) return;
  const bool by_key =
      cfg.max_device_memory > 0 && (free_bytes <= 0 || cfg.max_device_memory < free_bytes);
  throw BadInput("the run needs " + mib(m.device_total()) + " on device " + cfg.device + " (base weights " +
                 mib(m.device_weights) + ", LoRA + gradients + AdamW " + mib(m.device_adapter()) + ", activations " +
                 mib(m.device_acts) + ", keys/values " + mib(m.kv) + ", workspace " + mib(m.device_workspace) +
                 (m.device_passes > 1 ? "; in passes of " + std::to_string(m.pass_rows) + " row(s)"
                                      : std::string()) +
                 "), and " +
                 (by_key ? "max_device_memory is " + format_memory_size(cfg.max_device_memory)
                         : mib(free_bytes) + " is free there") +
                 ": lower micro_batch_size (" +
                 std::to_string(cfg.micro_batch_size) + "), sequence_len (" + std::to_string(cfg.sequence_len) +
                 ") or lora_r (" + std::to_string(cfg.lora_r) +
                 "), turn on gradient_checkpointing, or use adapter: qlora (an NF4 base); --dry-run prints the plan");
}

void refuse_if_too_large(const TrainConfig& cfg, const MemoryPlan& m, double avail) {
  if (m.on_device) {  // the activations and keys/values are on the device: the host holds the rest
    if (avail <= 0 || m.host_owned_with_device() <= avail) return;
    throw BadInput("the run needs " + mib(m.host_owned_with_device()) + " of host memory (LoRA + AdamW " +
                   mib(4 * m.params) + (m.nf4 > 0 ? ", NF4 base " + mib(m.nf4) : std::string()) + "), and " +
                   mib(avail) + " is available: lower lora_r (" + std::to_string(cfg.lora_r) + ")");
  }
  if (avail <= 0 || m.owned() <= avail) return;
  throw BadInput("the run needs " + mib(m.owned()) +
                 " of memory beyond the mapped base (LoRA + AdamW " + mib(4 * m.params) +
                 ", activations " + mib(m.acts) + ", keys/values " + mib(m.kv) +
                 (m.nf4 > 0 ? ", NF4 base " + mib(m.nf4) : std::string()) +
                 (m.copies > 0 ? ", row-shard copies " + mib(m.copies) : std::string()) +
                 "), and " + mib(avail) + " is available: lower micro_batch_size (" +
                 std::to_string(cfg.micro_batch_size) + "), sequence_len (" +
                 std::to_string(cfg.sequence_len) + ") or lora_r (" + std::to_string(cfg.lora_r) +
                 "), or turn on gradient_checkpointing (--dry-run prints the plan)");
}

}  // namespace medtune::train
