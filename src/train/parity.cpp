#include "model/parity.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"
#include "core/tensor_convert.h"
#include "io/safetensors.h"
#include "model/generate.h"
#include "model/llama.h"
#include "ops/ops.h"

namespace medtune::model {

namespace {

const RawTensor& need(const io::SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw BadInput(f.path + ": missing tensor '" + name + "'");
  return it->second;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BadInput(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(path + ": invalid JSON: " + e.what());
  }
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

ParityResult check_parity(const std::string& dir, const ParityTolerances& tol) {
  const auto ref = io::read_safetensors(dir + "/reference.safetensors");
  const auto meta = read_json(dir + "/meta.json");
  LlamaModel model(io::open_checkpoint(dir + "/base"));
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
  std::vector<float> got;
  std::vector<double> want;
  for (int64_t n = 0; n < B * T; ++n) {
    if (mask[static_cast<size_t>(n)] == 0) continue;
    got.insert(got.end(), logits.begin() + n * V, logits.begin() + (n + 1) * V);
    want.insert(want.end(), base_ref.begin() + n * V, base_ref.begin() + (n + 1) * V);
  }
  nlohmann::json r;
  r["fixture"] = dir;
  const double logit_err = max_rel_error(got, want);
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

  // LoRA checks arrive with training (adapter loading, backward, AdamW).
  r["lora_logits"] = "not implemented";
  r["lora_grads"] = "not implemented";
  r["lora_adamw_step"] = "not implemented";
  r["tolerances"] = {{"logits_rel", tol.logits_rel}, {"loss_rel", tol.loss_rel}};

  ParityResult out;
  out.ok = logit_err <= tol.logits_rel && loss_err <= tol.loss_rel && greedy_equal;
  r["ok"] = out.ok;
  out.report = std::move(r);
  return out;
}

}  // namespace medtune::model
