#include "train/parity.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor_convert.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "io/whole_file.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "model/train_step.h"
#include "ops/ops.h"
#include "train/optimizer.h"
#include "train/train_state.h"

namespace medtune::train {

using model::Batch;
using model::GenerateOptions;
using model::LlamaModel;

namespace {

const RawTensor& need(const io::SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw BadInput(f.path + ": missing tensor '" + name + "'");
  return it->second;
}

// max |a - b| / max |b| over all elements.
double max_rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return den > 0 ? num / den : num;
}

// transformers' causal-LM loss: logits (B, T, V) at t predict labels at t + 1; -100 ignored.
double causal_lm_loss(const std::vector<float>& logits, const std::vector<int64_t>& labels,
                      int64_t B, int64_t T, int64_t V) {
  std::vector<int64_t> targets(static_cast<size_t>(B * T), -100);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) targets[static_cast<size_t>(b * T + t)] = labels[static_cast<size_t>(b * T + t + 1)];
  for (int64_t id : targets)
    if (id >= V) throw BadInput("labels hold id " + std::to_string(id) + " >= vocabulary size");
  const auto sum = ops::cross_entropy_sum(logits.data(), targets.data(), B * T, V);
  return sum.count > 0 ? sum.sum / static_cast<double>(sum.count) : 0.0;
}

}  // namespace

ParityTolerances bf16_tolerances(int64_t num_layers) {
  ParityTolerances t;
  t.logits_rel = std::ldexp(1.0, -7) * static_cast<double>(2 * num_layers + 1);
  t.loss_rel = t.logits_rel;
  t.grads_rel = std::ldexp(1.0, -7) * static_cast<double>(4 * num_layers + 2);
  return t;
}

ParityResult check_parity(const std::string& dir, const ParityTolerances& tol, backend::Backend& be) {
  const auto ref = io::read_safetensors(dir + "/reference.safetensors");
  const auto meta = io::read_json_file(dir + "/meta.json");
  LlamaModel model(io::open_checkpoint(dir + "/base"), model::WeightQuant::kNone, be);
  const int64_t V = model.config().vocab_size;

  const RawTensor& ids_t = need(ref, "input_ids");
  if (ids_t.shape.size() != 2) throw BadInput(ref.path + ": input_ids must be [B, T]");
  const int64_t B = ids_t.shape[0], T = ids_t.shape[1];
  const auto ids = tensor_to_i64(ids_t);
  const auto mask = tensor_to_i64(need(ref, "attention_mask"));
  const auto labels = tensor_to_i64(need(ref, "labels"));
  const auto base_ref = tensor_to_f64(need(ref, ref.tensors.count("base_logits_f64") ? "base_logits_f64" : "base_logits"));
  if (static_cast<int64_t>(base_ref.size()) != B * T * V || mask.size() != ids.size() || labels.size() != ids.size())
    throw BadInput(ref.path + ": tensor shapes disagree with input_ids [B, T] and vocab " + std::to_string(V));

  Batch batch;
  batch.B = B;
  batch.T = T;
  for (int64_t id : ids) batch.ids.push_back(static_cast<int32_t>(id));
  for (int64_t m : mask) batch.mask.push_back(m != 0 ? 1 : 0);
  const auto logits = model.logits(batch);

  // Logits at padded query positions are not compared: transformers leaves them undefined.
  auto unpadded_logit_error = [&](const std::vector<float>& got_all, const std::vector<double>& want_all) {
    std::vector<float> got;
    std::vector<double> want;
    for (int64_t n = 0; n < B * T; ++n) {
      if (mask[static_cast<size_t>(n)] == 0) continue;
      got.insert(got.end(), got_all.begin() + n * V, got_all.begin() + (n + 1) * V);
      want.insert(want.end(), want_all.begin() + n * V, want_all.begin() + (n + 1) * V);
    }
    return max_rel_error(got, want);
  };
  nlohmann::json r;
  r["fixture"] = dir;
  r["device"] = be.device().str();
  r["precision"] = backend::precision_name(be.precision());
  r["backend"] = be.describe();
  const double logit_err = unpadded_logit_error(logits, base_ref);
  r["base_logits_max_rel_error"] = logit_err;
  const double loss = causal_lm_loss(logits, labels, B, T, V);
  const double ref_loss = meta.at("base_loss").get<double>();
  const double loss_err = std::fabs(loss - ref_loss) / std::max(1.0, std::fabs(ref_loss));
  r["base_loss"] = loss;
  r["base_loss_reference"] = ref_loss;
  r["base_loss_rel_error"] = loss_err;

  const auto gp = tensor_to_i64(need(ref, "greedy_prompt"));
  const auto go = tensor_to_i64(need(ref, "greedy_out"));
  std::vector<int32_t> prompt(gp.begin(), gp.end());
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int64_t>(go.size() - gp.size());
  const auto gen = generate(model, prompt, opt);
  std::vector<int64_t> full(gp.begin(), gp.end());
  full.insert(full.end(), gen.begin(), gen.end());
  const bool greedy_equal = full == go;
  r["greedy_tokens_equal"] = greedy_equal;
  r["greedy_tokens"] = full;
  r["greedy_reference"] = go;

  // --- LoRA: the PEFT adapter applied, its gradients, and one AdamW step.
  const std::string adapter_dir = dir + "/adapter_init";
  auto lora = model::lora_from_peft(io::read_peft_adapter(adapter_dir), model.config(), adapter_dir);
  model.set_lora(&lora);
  const auto lora_logits = model.logits(batch);
  const auto lora_ref = tensor_to_f64(need(ref, ref.tensors.count("lora_logits_f64") ? "lora_logits_f64" : "lora_logits"));
  if (lora_ref.size() != base_ref.size()) throw BadInput(ref.path + ": lora_logits has the wrong size");
  const double lora_logit_err = unpadded_logit_error(lora_logits, lora_ref);
  r["lora_logits_max_rel_error"] = lora_logit_err;

  model::TrainBatch tb;
  tb.B = B;
  tb.T = T;
  tb.ids = batch.ids;
  tb.mask = batch.mask;
  tb.targets.assign(static_cast<size_t>(B * T), -100);
  int64_t count = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int64_t label = labels[static_cast<size_t>(b * T + t + 1)];
      tb.targets[static_cast<size_t>(b * T + t)] = label;
      count += label >= 0;
    }
  model::TrainOptions topt;
  topt.loss_scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  lora.zero_grad();
  // The training step and AdamW run on the model's backend (a device: there, train/train_state.h).
  LlamaModel& trained = model;
  r["training_checks_device"] = trained.backend().device().str();
  const auto step = model::forward_backward(trained, lora, tb, topt);
  const double lora_loss = step.tokens > 0 ? step.loss_sum / static_cast<double>(step.tokens) : 0.0;
  const double lora_ref_loss = meta.at("lora_loss").get<double>();
  const double lora_loss_err = std::fabs(lora_loss - lora_ref_loss) / std::max(1.0, std::fabs(lora_ref_loss));
  r["lora_loss"] = lora_loss;
  r["lora_loss_rel_error"] = lora_loss_err;

  const auto grads = io::read_safetensors(dir + "/lora_grads.safetensors");
  const auto after = io::read_safetensors(dir + "/lora_after_adamw.safetensors");
  // Gradients: max |dg| / max |g| over all LoRA tensors together.
  std::vector<float> g_got, p_got;
  std::vector<double> g_want, p_want;
  std::vector<ParamRef> params;
  std::vector<std::pair<float*, std::vector<double>>> reference_grads;  // gradient, its reference: bf16 only
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (int p = 0; p < model::kNumProj; ++p) {
      auto& ll = lora.layers[l][static_cast<size_t>(p)];
      if (!ll.enabled()) continue;
      const std::string prefix = "base_model.model." + model::proj_module_path(static_cast<int64_t>(l), static_cast<model::Proj>(p));
      for (auto [suffix, value, grad] : {std::tuple{".lora_A.weight", &ll.A, &ll.dA}, std::tuple{".lora_B.weight", &ll.B, &ll.dB}}) {
        const auto want_g = tensor_to_f64(need(grads, prefix + suffix));
        if (want_g.size() != grad->size()) throw BadInput(grads.path + ": tensor '" + prefix + suffix + "' has the wrong size");
        g_got.insert(g_got.end(), grad->begin(), grad->end());
        g_want.insert(g_want.end(), want_g.begin(), want_g.end());
        // At bf16 AdamW steps from the reference gradients (parity.h): copied over ours, which
        // have been compared above.
        params.push_back(ParamRef{prefix + suffix, value->data(), grad->data(), static_cast<int64_t>(value->size())});
        if (trained.backend().precision() != backend::Precision::kFp32)
          reference_grads.emplace_back(grad->data(), want_g);
      }
    }
  const double grad_err = max_rel_error(g_got, g_want);
  r["lora_grads_max_rel_error"] = grad_err;
  for (auto& [slot, want] : reference_grads)
    for (size_t j = 0; j < want.size(); ++j) slot[j] = static_cast<float>(want[j]);
  r["lora_adamw_from"] = reference_grads.empty() ? "medtune's gradients" : "the reference gradients";

  const auto& am = meta.at("adamw");
  AdamWConfig acfg;
  acfg.lr = am.at("lr").get<double>();
  acfg.beta1 = am.at("betas").at(0).get<double>();
  acfg.beta2 = am.at("betas").at(1).get<double>();
  acfg.eps = am.at("eps").get<double>();
  acfg.weight_decay = am.at("weight_decay").get<double>();
  AdamW adamw(acfg, params);
  {
    TrainState state(trained.backend(), lora, adamw);
    state.to_device();
    state.load_gradients();
    state.adamw_step(acfg.lr);
    state.to_host();
  }
  for (const auto& prm : params) {
    const auto want_p = tensor_to_f64(need(after, prm.name));
    p_got.insert(p_got.end(), prm.data, prm.data + prm.numel);
    p_want.insert(p_want.end(), want_p.begin(), want_p.end());
  }
  const double adamw_err = max_rel_error(p_got, p_want);
  r["lora_adamw_max_rel_error"] = adamw_err;
  model.set_lora(nullptr);

  r["tolerances"] = {{"logits_rel", tol.logits_rel}, {"loss_rel", tol.loss_rel},
                     {"grads_rel", tol.grads_rel}, {"adamw_rel", tol.adamw_rel}};

  ParityResult out;
  out.ok = logit_err <= tol.logits_rel && loss_err <= tol.loss_rel && greedy_equal &&
           lora_logit_err <= tol.logits_rel && lora_loss_err <= tol.loss_rel &&
           grad_err <= tol.grads_rel && adamw_err <= tol.adamw_rel;
  r["ok"] = out.ok;
  out.report = std::move(r);
  return out;
}

}  // namespace medtune::train
