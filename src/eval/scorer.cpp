#include "eval/scorer.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>

#include "core/error.h"

namespace medtune::eval {

Scoring parse_scoring(const std::string& name) {
  if (name == "letter") return Scoring::letter;
  if (name == "text") return Scoring::text;
  throw BadInput("unknown scoring '" + name + "' (valid: letter, text)");
}

namespace {

// Questions per thread from which score_questions hands whole questions to threads: the tail
// (at most one question per thread still running) then costs little next to the run.
constexpr int64_t kQuestionsPerThread = 4;

// The log-softmax normalizer of a logit row, max + log(sum exp(row - max)), in double:
// log softmax(row)[id] = row[id] - log_normalizer(row). Computed once per row, however many
// of its entries are scored.
double log_normalizer(const float* row, int64_t V) {
  double mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return mx + std::log(sum);
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
// On the model's backend, as the prefix is.
model::KvCache replicate(const model::KvCache& prefix, const model::LlamaModel& model, int64_t B,
                         int64_t Smax) {
  model::KvCache out = model.make_cache(B, Smax);
  backend::Backend& be = out.backend();
  const int64_t row = prefix.NKV * prefix.HD, P = prefix.length;
  for (int64_t l = 0; l < prefix.L; ++l)
    for (int64_t b = 0; b < B; ++b) {
      const size_t bytes = static_cast<size_t>(P * row) * sizeof(float);
      be.copy(out.k.data() + ((l * B + b) * Smax) * row, prefix.k.data() + (l * prefix.B * prefix.Smax) * row, bytes);
      be.copy(out.v.data() + ((l * B + b) * Smax) * row, prefix.v.data() + (l * prefix.B * prefix.Smax) * row, bytes);
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
  const double last_norm = log_normalizer(last.data(), V);
  for (int64_t b = 0; b < B; ++b) {
    if (conts[static_cast<size_t>(b)].empty()) throw Internal("scorer: empty continuation");
    ll[static_cast<size_t>(b)] = static_cast<double>(last[static_cast<size_t>(conts[static_cast<size_t>(b)][0])]) - last_norm;
  }
  if (T <= 1) return ll;
  // Feed tokens [0, T-1) of every continuation; position j's logits score token j + 1. Only
  // those positions go through the lm_head (V x C, the largest matrix of a small model):
  // padding positions score nothing.
  model::Batch batch;
  batch.B = B;
  batch.T = T - 1;
  std::vector<int64_t> rows;  // flat indices b*(T-1) + j of the positions that score a token
  for (int64_t b = 0; b < B; ++b) {
    const auto& c = conts[static_cast<size_t>(b)];
    for (int64_t j = 0; j < T - 1; ++j) {
      const bool real = j + 1 < static_cast<int64_t>(c.size());
      batch.ids.push_back(real ? c[static_cast<size_t>(j)] : 0);
      batch.mask.push_back(real ? 1 : 0);
      if (real) rows.push_back(b * (T - 1) + j);
    }
  }
  model::KvCache cache = replicate(prefix, model, B, prefix.length + T);
  std::vector<float> logits;  // (rows.size(), V)
  model.forward(batch, cache, logits, rows);
  size_t r = 0;  // rows are in (b, j) order, as they were listed
  for (int64_t b = 0; b < B; ++b) {
    const auto& c = conts[static_cast<size_t>(b)];
    for (int64_t j = 1; j < static_cast<int64_t>(c.size()); ++j, ++r) {
      const float* row = logits.data() + static_cast<int64_t>(r) * V;
      ll[static_cast<size_t>(b)] += static_cast<double>(row[c[static_cast<size_t>(j)]]) - log_normalizer(row, V);
    }
  }
  return ll;
}

}  // namespace

ScoredQuestion score_question(model::LlamaModel& model, const PromptRenderer& prompts,
                              const McqItem& item, Scoring scoring) {
  TokenizedQuestion tq = prompts.tokenize(item, scoring == Scoring::text);
  const auto& conts = scoring == Scoring::text ? tq.text_tokens : tq.letter_tokens;
  // The context length: lm-eval's loglikelihood keeps the last max_length + 1 tokens of context +
  // continuation (the model sees all but the last), dropping from the left. With one prompt
  // shared by all options, the longest option sets the cut.
  const int64_t n_ctx = model.config().max_position_embeddings;
  int64_t longest = 0;
  for (const auto& c : conts) longest = std::max<int64_t>(longest, static_cast<int64_t>(c.size()));
  int64_t dropped = 0;
  if (n_ctx > 0 && static_cast<int64_t>(tq.context.size()) + longest - 1 > n_ctx) {
    const int64_t keep = n_ctx + 1 - longest;
    if (keep < 1)
      throw BadInput(item.id + ": an option is " + std::to_string(longest) + " tokens, longer than the model's context (" +
                     std::to_string(n_ctx) + " tokens, max_position_embeddings)");
    dropped = static_cast<int64_t>(tq.context.size()) - keep;
    tq.context.erase(tq.context.begin(), tq.context.begin() + dropped);
  }
  const int64_t P = static_cast<int64_t>(tq.context.size());
  model::KvCache prefix = model.make_cache(1, P);
  std::vector<float> last;
  model.forward(model::Batch{1, P, tq.context, {}}, prefix, last, {P - 1});

  ScoredQuestion out;
  out.context_tokens = P;
  QuestionResult& r = out.result;
  r.id = item.id;
  r.meta_info = item.meta_info;
  r.gold = item.answer;
  r.truncated_tokens = dropped;
  r.option_logprobs = continuation_logliks(model, prefix, last, conts);
  for (double ll : r.option_logprobs)
    if (!std::isfinite(ll))
      throw BadInput(item.id + ": the model's log-probabilities are not finite (" + std::to_string(ll) +
                     "): its weights or the adapter hold NaN/Inf or overflow; check them with --check-tensors");
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
  const auto n = static_cast<int64_t>(items.size());
  std::vector<QuestionResult> out(items.size());
  // Questions are independent, so with enough of them each thread scores whole questions:
  // inside this parallel region every op runs on its calling thread alone (nested OpenMP
  // regions get one thread, OpenBLAS runs serially), so a forward crosses no barrier and no
  // thread waits on another. Splitting each small op over the threads instead spent most of
  // the CPU time spinning at barriers (SmolLM2: 9 heads, 3 panels of k_proj for 2 threads).
  // Few questions per thread: one at a time, each op over all threads (an uneven tail would
  // leave threads idle). Each question's numbers do not depend on which way it ran.
  // A device backend runs one question at a time from this thread (its stream is not shared).
  const int threads = omp_get_max_threads();
  const bool per_question = model.backend().device().is_cpu() && threads > 1 && n >= kQuestionsPerThread * threads;
  std::vector<std::exception_ptr> errors(items.size());
  std::atomic<bool> failed{false};
  size_t done = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (per_question)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load()) continue;  // stop early: the first error (in item order) is thrown below
    try {
      out[static_cast<size_t>(i)] = score_question(model, prompts, items[static_cast<size_t>(i)], scoring).result;
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
      failed = true;
    }
#pragma omp critical(medtune_eval_progress)
    {
      ++done;
      if (progress) progress(done, items.size());
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

double accuracy(model::LlamaModel& model, const PromptRenderer& prompts, const std::vector<McqItem>& items,
                Scoring scoring) {
  if (items.empty()) return 0.0;
  int64_t correct = 0;
  for (const auto& r : score_questions(model, prompts, items, scoring)) correct += r.pred == r.gold;
  return static_cast<double>(correct) / static_cast<double>(items.size());
}

}  // namespace medtune::eval
