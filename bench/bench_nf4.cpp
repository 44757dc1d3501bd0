// QLoRA (NF4 base) against LoRA on an fp32 base, side by side in one process, and the NF4
// memory plan of a model known only by its config.json.
//
//   bench_nf4 step MODEL_DIR [--batch 4] [--seq 256] [--rank 16] [--steps 5] [--threads N]
//       Loads MODEL_DIR (F32/F16/BF16) twice: as stored and quantized to NF4 at load
//       (model::WeightQuant::kNf4). Alternates timed training steps (forward + backward + AdamW,
//       LoRA on q,k,v,o,gate,up,down, B x T random tokens, every next token a target) between the
//       two after one warm-up each, so that machine load hits both alike. Prints JSON: median step
//       seconds of each and their ratio.
//   bench_nf4 quality MODEL_DIR QUESTIONS_JSONL [--limit 50]
//       Next-token distribution after each MedQA prompt ("Question: ...\nA. ...\nAnswer:", the
//       lm-eval layout) with the base as stored vs quantized to NF4: top-1 agreement and mean
//       KL(stored || nf4) in nats. Prints JSON with aggregates only (no question text).
//   bench_nf4 plan CONFIG_JSON [--stored BF16|F16|F32]
//       Base-weight bytes of that model as stored and with its block linears in NF4
//       (model::planned_weight_bytes, the function behind `medtune train --dry-run`).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include <cmath>
#include <fstream>

#include "io/hf_config.h"
#include "tokenizer/tokenizer.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/train_step.h"
#include "train/optimizer.h"

namespace {

using namespace medtune;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One model with its adapter and optimizer: a complete LoRA training setup.
struct Run {
  model::LlamaModel m;
  model::LoraWeights lora;
  std::vector<train::ParamRef> params;
  std::unique_ptr<train::AdamW> adamw;
  std::vector<double> times;
  double loss = 0;

  Run(const std::string& path, model::WeightQuant q, int64_t rank)
      : m(io::open_checkpoint(path), q) {
    model::LoraConfig lc;
    lc.r = rank;
    lc.alpha = 2.0 * static_cast<double>(rank);
    lc.targets = {model::Proj::q, model::Proj::k, model::Proj::v, model::Proj::o,
                  model::Proj::gate, model::Proj::up, model::Proj::down};
    lora = model::init_lora(m.config(), lc, 42);  // same seed: same adapter in both runs
    m.set_lora(&lora);
    for (auto& layer : lora.layers)
      for (auto& ll : layer)
        if (ll.enabled()) {
          params.push_back({"A", ll.A.data(), ll.dA.data(), static_cast<int64_t>(ll.A.size())});
          params.push_back({"B", ll.B.data(), ll.dB.data(), static_cast<int64_t>(ll.B.size())});
        }
    adamw = std::make_unique<train::AdamW>(train::AdamWConfig{}, params);
  }

  void step(const model::TrainBatch& batch, const model::TrainOptions& opt, bool timed) {
    const auto t0 = std::chrono::steady_clock::now();
    lora.zero_grad();
    loss = model::forward_backward(m, lora, batch, opt).loss_sum * opt.loss_scale;
    adamw->step(1e-4);
    if (timed) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
};

int step_mode(int argc, char** argv) {
  const std::string path = argv[2];
  int64_t B = 4, T = 256, rank = 16, steps = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (k == "--batch") B = v;
    else if (k == "--seq") T = v;
    else if (k == "--rank") rank = v;
    else if (k == "--steps") steps = v;
    else if (k == "--threads") omp_set_num_threads(static_cast<int>(v));
  }
  Run fp(path, model::WeightQuant::kNone, rank);
  Run nf(path, model::WeightQuant::kNf4, rank);

  model::TrainBatch batch;  // (B, T) random ids; targets[t] = ids[t + 1]
  batch.B = B;
  batch.T = T;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(fp.m.config().vocab_size) - 1);
  for (int64_t i = 0; i < B * T; ++i) batch.ids.push_back(tok(rng));
  batch.targets.assign(static_cast<size_t>(B * T), -100);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t)
      batch.targets[static_cast<size_t>(b * T + t)] = batch.ids[static_cast<size_t>(b * T + t + 1)];
  model::TrainOptions opt;
  opt.loss_scale = 1.0 / static_cast<double>(B * (T - 1));

  for (int64_t s = 0; s <= steps; ++s) {  // s = 0: warm-up
    fp.step(batch, opt, s > 0);
    nf.step(batch, opt, s > 0);
  }
  const double a = median(fp.times), b = median(nf.times);
  nlohmann::json j = {{"model", path}, {"batch", B}, {"seq", T}, {"rank", rank},
                      {"threads", omp_get_max_threads()}, {"steps_timed", steps},
                      {"lora_fp32_median_step_s", a}, {"qlora_nf4_median_step_s", b},
                      {"ratio_nf4_over_fp32", b / a},
                      {"lora_fp32_last_loss", fp.loss}, {"qlora_nf4_last_loss", nf.loss}};
  std::cout << j.dump() << "\n";
  return 0;
}

// log-softmax of one row of logits, in double
std::vector<double> log_probs(const float* z, int64_t V) {
  double mx = -1e300;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(z[v]) - mx);
  const double lse = mx + std::log(s);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = static_cast<double>(z[v]) - lse;
  return out;
}

int quality_mode(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string path = argv[2], questions = argv[3];
  int64_t limit = 50;
  for (int i = 4; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--limit") limit = std::atol(argv[i + 1]);
  const auto tok = tokenizer::Tokenizer::from_tokenizer_json(path + "/tokenizer.json");
  model::LlamaModel fp(io::open_checkpoint(path), model::WeightQuant::kNone);
  model::LlamaModel nf(io::open_checkpoint(path), model::WeightQuant::kNf4);
  const int64_t V = fp.config().vocab_size;
  std::ifstream in(questions);
  std::string line;
  int64_t n = 0, agree = 0, tokens = 0;
  double kl_sum = 0, kl_max = 0;
  while (n < limit && std::getline(in, line)) {
    const auto q = nlohmann::json::parse(line);
    std::string prompt = "Question: " + q.at("question").get<std::string>() + "\n";
    for (const auto& [letter, text] : q.at("options").items()) prompt += letter + ". " + text.get<std::string>() + "\n";
    prompt += "Answer:";
    const std::vector<int32_t> ids = tok->encode(prompt, true);
    const auto T = static_cast<int64_t>(ids.size());
    model::Batch batch{1, T, ids, {}};
    std::vector<float> a, b;
    model::KvCache ca(fp.config(), 1, T), cb(nf.config(), 1, T);
    fp.forward(batch, ca, a, {T - 1});
    nf.forward(batch, cb, b, {T - 1});
    const auto la = log_probs(a.data(), V), lb = log_probs(b.data(), V);
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) kl += std::exp(la[static_cast<size_t>(v)]) * (la[static_cast<size_t>(v)] - lb[static_cast<size_t>(v)]);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    agree += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
    tokens += T;
    ++n;
  }
  nlohmann::json j = {{"model", path}, {"prompts", n}, {"prompt_tokens", tokens},
                      {"top1_agreement", static_cast<double>(agree) / static_cast<double>(n)},
                      {"mean_kl_nats", kl_sum / static_cast<double>(n)}, {"max_kl_nats", kl_max}};
  std::cout << j.dump() << "\n";
  return 0;
}

int plan_mode(int argc, char** argv) {
  const ModelConfig c = io::read_hf_config(argv[2]);
  DType stored = DType::BF16;
  for (int i = 3; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--stored")
      stored = std::string(argv[i + 1]) == "F32" ? DType::F32 : std::string(argv[i + 1]) == "F16" ? DType::F16 : DType::BF16;
  const auto none = model::planned_weight_bytes(c, stored, model::WeightQuant::kNone);
  const auto nf4 = model::planned_weight_bytes(c, stored, model::WeightQuant::kNf4);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  nlohmann::json j = {{"config", argv[2]}, {"stored", std::string(dtype_name(stored))},
                      {"base_as_stored_gib", static_cast<double>(none.mapped) / gib},
                      {"nf4_linears_gib", static_cast<double>(nf4.quantized) / gib},
                      {"nf4_rest_mapped_gib", static_cast<double>(nf4.mapped) / gib}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 3 ? argv[1] : "";
  if (mode == "step") return step_mode(argc, argv);
  if (mode == "plan") return plan_mode(argc, argv);
  if (mode == "quality") return quality_mode(argc, argv);
  std::cerr << "usage: bench_nf4 step MODEL_DIR [--batch B] [--seq T] [--rank R] [--steps N] [--threads N]\n"
               "       bench_nf4 quality MODEL_DIR QUESTIONS_JSONL [--limit N]\n"
               "       bench_nf4 plan CONFIG_JSON [--stored BF16|F16|F32]\n";
  return 2;
}
