#include "eval/scorer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace medtune::eval {

Scoring parse_scoring(const std::string& name) {
  if (name == "letter") return Scoring::letter;
  if (name == "text") return Scoring::text;
  throw BadInput("unknown scoring '" + name + "' (valid: letter, text)");
}

namespace {

// log softmax(row)[id], in double.
double log_prob(const float* row, int64_t V, int32_t id) {
  double mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[id]) - mx - std::log(sum);
}

int argmax(const std::vector<double>& x) {
  int best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int>(i);
  return best;
}

int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A cache of B rows, each holding a copy of row 0 of `prefix` (positions [0, prefix.length)).
model::KvCache replicate(const model::KvCache& prefix, const ModelConfig& c, int64_t B,
                         int64_t Smax) {
  model::KvCache out(c, B, Smax);
  const int64_t row = prefix.NKV * prefix.HD, P = prefix.length;
  for (int64_t l = 0; l < prefix.L; ++l)
    for (int64_t b = 0; b < B; ++b) {
      const size_t bytes = static_cast<size_t>(P * row) * sizeof(float);
      std::memcpy(out.k.data() + ((l * B + b) * Smax) * row, prefix.k.data() + (l * prefix.B * prefix.Smax) * row, bytes);
      std::memcpy(out.v.data() + ((l * B + b) * Smax) * row, prefix.v.data() + (l * prefix.B * prefix.Smax) * row, bytes);
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < P; ++t) out.valid[static_cast<size_t>(b * Smax + t)] = 1;
  out.length = P;
  return out;
}

// Sum of log-probabilities of each continuation after the context whose last-position logits
// are `last` and whose keys/values are in `prefix`.
std::vector<double> continuation_logliks(model::LlamaModel& model, const model::KvCache& prefix,
                                         const std::vector<float>& last,
                                         const std::vector<std::vector<int32_t>>& conts) {
  const int64_t V = model.config().vocab_size, B = static_cast<int64_t>(conts.size());
  int64_t T = 0;
  for (const auto& c : conts) T = std::max<int64_t>(T, static_cast<int64_t>(c.size()));
  std::vector<double> ll(static_cast<size_t>(B), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    if (conts[static_cast<size_t>(b)].empty()) throw Internal("scorer: empty continuation");
    ll[static_cast<size_t>(b)] = log_prob(last.data(), V, conts[static_cast<size_t>(b)][0]);
  }
  if (T <= 1) return ll;
  // Feed tokens [0, T-1) of every continuation; position j's logits score token j + 1.
  model::Batch batch;
  batch.B = B;
  batch.T = T - 1;
  for (const auto& c : conts)
    for (int64_t j = 0; j < T - 1; ++j) {
      const bool real = j + 1 < static_cast<int64_t>(c.size());
      batch.ids.push_back(real ? c[static_cast<size_t>(j)] : 0);
      batch.mask.push_back(real ? 1 : 0);
    }
  model::KvCache cache = replicate(prefix, model.config(), B, prefix.length + T);
  std::vector<float> logits;  // (B, T-1, V)
  model.forward(batch, cache, logits);
  for (int64_t b = 0; b < B; ++b) {
    const auto& c = conts[static_cast<size_t>(b)];
    for (int64_t j = 1; j < static_cast<int64_t>(c.size()); ++j)
      ll[static_cast<size_t>(b)] += log_prob(logits.data() + (b * (T - 1) + j - 1) * V, V, c[static_cast<size_t>(j)]);
  }
  return ll;
}

}  // namespace

ScoredQuestion score_question(model::LlamaModel& model, const PromptRenderer& prompts,
                              const McqItem& item, Scoring scoring) {
  const TokenizedQuestion tq = prompts.tokenize(item, scoring == Scoring::text);
  const auto& conts = scoring == Scoring::text ? tq.text_tokens : tq.letter_tokens;
  const int64_t P = static_cast<int64_t>(tq.context.size());
  model::KvCache prefix(model.config(), 1, P);
  std::vector<float> last;
  model.forward(model::Batch{1, P, tq.context, {}}, prefix, last, {P - 1});

  ScoredQuestion out;
  out.context_tokens = P;
  QuestionResult& r = out.result;
  r.id = item.id;
  r.meta_info = item.meta_info;
  r.gold = item.answer;
  r.option_logprobs = continuation_logliks(model, prefix, last, conts);
  r.option_probs = softmax(r.option_logprobs);
  r.pred = argmax(r.option_logprobs);
  if (scoring == Scoring::text) {
    std::vector<double> norm(r.option_logprobs.size());
    for (size_t i = 0; i < norm.size(); ++i)
      norm[i] = r.option_logprobs[i] / static_cast<double>(std::max<int64_t>(1, utf8_chars(item.options[i])));
    r.pred_norm = argmax(norm);
  }
  return out;
}

std::vector<QuestionResult> score_questions(model::LlamaModel& model, const PromptRenderer& prompts,
                                            const std::vector<McqItem>& items, Scoring scoring,
                                            const std::function<void(size_t, size_t)>& progress) {
  std::vector<QuestionResult> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    out.push_back(score_question(model, prompts, items[i], scoring).result);
    if (progress) progress(i + 1, items.size());
  }
  return out;
}

double accuracy(model::LlamaModel& model, const PromptRenderer& prompts, const std::vector<McqItem>& items,
                Scoring scoring) {
  if (items.empty()) return 0.0;
  int64_t correct = 0;
  for (const auto& item : items) correct += score_question(model, prompts, item, scoring).result.pred == item.answer;
  return static_cast<double>(correct) / static_cast<double>(items.size());
}

}  // namespace medtune::eval
