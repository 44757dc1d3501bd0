#include "eval/scorer.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>

#include "core/error.h"
#include "model/inference_plan.h"

namespace medtune::eval {

Scoring parse_scoring(const std::string& name) {
  if (name == "letter") return Scoring::letter;
  if (name == "text") return Scoring::text;
  throw BadInput("unknown scoring '" + name + "' (valid: letter, text)");
}

namespace {

// Questions per thread from which score_questions hands whole questions to threads. One: the
// tail (at most one question per thread still running) can cost up to a question's time, but
// splitting every small op over all threads instead costs far more as threads grow. Measured on
// the H200 machine's 16-vCPU Intel host: 48 questions (3 per thread, then below the old bound of
// 4) took 74 s with each op split over 16 threads, OpenBLAS's threads spinning in sched_yield
// (0.65 questions/s), while 300 questions, whole questions per thread, ran at 5.2/s.
constexpr int64_t kQuestionsPerThread = 1;

// Padded tokens per forward pass when a device scores questions in batches: 16 MedQA questions
// (~250 tokens each) by letter, or 4 by option text; activations of a 7B model at this size are
// ~1 GiB of fp32.
constexpr int64_t kDeviceBatchTokens = 4096;

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
  if (out.type != prefix.type) throw Internal("scorer: the prefix cache has another element type");
  const int64_t row = prefix.NKV * prefix.HD, P = prefix.length;
  const size_t bytes = static_cast<size_t>(P * row * prefix.elem_bytes());
  for (int64_t l = 0; l < prefix.L; ++l)
    for (int64_t b = 0; b < B; ++b) {
      be.copy(out.layer_k(l).at(b * Smax * row).data, prefix.layer_k(l).data, bytes);
      be.copy(out.layer_v(l).at(b * Smax * row).data, prefix.layer_v(l).data, bytes);
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

namespace {

// A question tokenized and cut to the model's context as lm-eval cuts it.
struct PreparedQuestion {
  TokenizedQuestion tq;
  bool text = false;    // option texts scored (else letters)
  int64_t dropped = 0;  // context tokens cut from the left
  // The scored continuations, per option.
  const std::vector<std::vector<int32_t>>& conts() const { return text ? tq.text_tokens : tq.letter_tokens; }
};

PreparedQuestion prepare_question(const model::LlamaModel& model, const PromptRenderer& prompts,
                                  const McqItem& item, Scoring scoring) {
  PreparedQuestion q;
  q.tq = prompts.tokenize(item, scoring == Scoring::text);
  q.text = scoring == Scoring::text;
  // The context length: lm-eval's loglikelihood keeps the last max_length + 1 tokens of context +
  // continuation (the model sees all but the last), dropping from the left. With one prompt
  // shared by all options, the longest option sets the cut.
  const int64_t n_ctx = model.config().max_position_embeddings;
  int64_t longest = 0;
  for (const auto& c : q.conts()) {
    if (c.empty()) throw Internal("scorer: empty continuation");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(c.size()));
  }
  if (n_ctx > 0 && static_cast<int64_t>(q.tq.context.size()) + longest - 1 > n_ctx) {
    const int64_t keep = n_ctx + 1 - longest;
    if (keep < 1)
      throw BadInput(item.id + ": an option is " + std::to_string(longest) + " tokens, longer than the model's context (" +
                     std::to_string(n_ctx) + " tokens, max_position_embeddings)");
    q.dropped = static_cast<int64_t>(q.tq.context.size()) - keep;
    q.tq.context.erase(q.tq.context.begin(), q.tq.context.begin() + q.dropped);
  }
  return q;
}

// The result from the options' log-likelihoods.
ScoredQuestion finish_question(const McqItem& item, Scoring scoring, const PreparedQuestion& q,
                               std::vector<double> option_logprobs) {
  ScoredQuestion out;
  out.context_tokens = static_cast<int64_t>(q.tq.context.size());
  QuestionResult& r = out.result;
  r.id = item.id;
  r.meta_info = item.meta_info;
  r.gold = item.answer;
  r.truncated_tokens = q.dropped;
  r.option_logprobs = std::move(option_logprobs);
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

// Questions scored together in one forward pass: rows of context + continuation (all but its
// last token), right-padded. Right padding keeps every real token at the position it has alone
// (0, 1, ...), and causal attention never reads the padding after it, so each row's numbers are
// its own, to fp32 summation order. Options whose rows are equal (letter scoring: every
// continuation is one token, so every option's row is the context) share one row. The logits of
// the scoring positions only go through the lm_head.
struct QuestionBatch {
  struct Scored {  // option o of question q: its tokens' positions in row `row`
    size_t q, o, row;
  };
  std::vector<const PreparedQuestion*> qs;
  model::Batch batch;                      // (B, T) the distinct rows, right-padded
  std::vector<Scored> scored;
  std::vector<int64_t> logit_rows;         // flat positions b*T + t whose logits are read
  std::vector<std::vector<size_t>> slots;  // [scored k][token j] -> index into logit_rows

  // What its pass holds on a device (model/inference_plan.h).
  model::InferenceShape shape() const {
    return {batch.B, batch.T, batch.B * batch.T, static_cast<int64_t>(logit_rows.size())};
  }
};

QuestionBatch build_batch(std::vector<const PreparedQuestion*> qs) {
  QuestionBatch qb;
  qb.qs = std::move(qs);
  std::vector<std::vector<int32_t>> rows;  // distinct (context + continuation minus its last token)
  for (size_t i = 0; i < qb.qs.size(); ++i) {
    const PreparedQuestion& q = *qb.qs[i];
    std::map<std::vector<int32_t>, size_t> row_of;  // this question's distinct rows
    for (size_t o = 0; o < q.conts().size(); ++o) {
      const auto& c = (q.conts())[o];
      std::vector<int32_t> ids = q.tq.context;
      ids.insert(ids.end(), c.begin(), c.end() - 1);
      auto [it, fresh] = row_of.try_emplace(ids, rows.size());
      if (fresh) rows.push_back(std::move(ids));
      qb.scored.push_back({i, o, it->second});
    }
  }
  int64_t T = 0;
  for (const auto& r : rows) T = std::max<int64_t>(T, static_cast<int64_t>(r.size()));
  const auto B = static_cast<int64_t>(rows.size());
  model::Batch& batch = qb.batch;
  batch.B = B;
  batch.T = T;
  batch.ids.assign(static_cast<size_t>(B * T), 0);
  batch.mask.assign(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& ids = rows[static_cast<size_t>(b)];
    std::copy(ids.begin(), ids.end(), batch.ids.begin() + b * T);
    std::fill(batch.mask.begin() + b * T, batch.mask.begin() + b * T + static_cast<int64_t>(ids.size()), 1);
  }
  // Logit rows: for option o of question q in row b, positions P - 1 + j score token j of the
  // continuation (P = the context's length). Each (row, position) once.
  std::map<int64_t, size_t> slot_of;  // flat position b*T + t -> index into the logits
  const auto slot = [&](int64_t flat) {
    auto [it, fresh] = slot_of.try_emplace(flat, qb.logit_rows.size());
    if (fresh) qb.logit_rows.push_back(flat);
    return it->second;
  };
  qb.slots.resize(qb.scored.size());
  for (size_t k = 0; k < qb.scored.size(); ++k) {
    const PreparedQuestion& q = *qb.qs[qb.scored[k].q];
    const auto P = static_cast<int64_t>(q.tq.context.size());
    const auto& c = (q.conts())[qb.scored[k].o];
    for (size_t j = 0; j < c.size(); ++j)
      qb.slots[k].push_back(slot(static_cast<int64_t>(qb.scored[k].row) * T + P - 1 + static_cast<int64_t>(j)));
  }
  return qb;
}

// logliks[i][o]: the log-likelihood of option o of the batch's question i.
void score_batch(model::LlamaModel& model, const QuestionBatch& qb, std::vector<std::vector<double>>& logliks) {
  const int64_t V = model.config().vocab_size;
  model::KvCache cache = model.make_cache(qb.batch.B, qb.batch.T);
  std::vector<float> logits;  // (logit_rows, V)
  model.forward(qb.batch, cache, logits, qb.logit_rows);
  std::vector<double> norm(qb.logit_rows.size());
  for (size_t i = 0; i < norm.size(); ++i) norm[i] = log_normalizer(logits.data() + static_cast<int64_t>(i) * V, V);
  for (size_t k = 0; k < qb.scored.size(); ++k) {
    const PreparedQuestion& q = *qb.qs[qb.scored[k].q];
    const auto& c = (q.conts())[qb.scored[k].o];
    double ll = 0;
    for (size_t j = 0; j < c.size(); ++j) {
      const size_t r = qb.slots[k][j];
      ll += static_cast<double>(logits[r * static_cast<size_t>(V) + static_cast<size_t>(c[j])]) - norm[r];
    }
    logliks[qb.scored[k].q][qb.scored[k].o] = ll;
  }
}

}  // namespace

ScoredQuestion score_question(model::LlamaModel& model, const PromptRenderer& prompts,
                              const McqItem& item, Scoring scoring) {
  const PreparedQuestion q = prepare_question(model, prompts, item, scoring);
  const auto P = static_cast<int64_t>(q.tq.context.size());
  model::KvCache prefix = model.make_cache(1, P);
  std::vector<float> last;
  model.forward(model::Batch{1, P, q.tq.context, {}}, prefix, last, {P - 1});
  return finish_question(item, scoring, q, continuation_logliks(model, prefix, last, q.conts()));
}

std::vector<QuestionResult> score_questions_batched(model::LlamaModel& model, const PromptRenderer& prompts,
                                                    const std::vector<McqItem>& items, Scoring scoring,
                                                    int64_t batch_tokens,
                                                    const std::function<void(size_t, size_t)>& progress) {
  // Tokenized once, then dealt into batches in order.
  std::vector<PreparedQuestion> prepared;
  prepared.reserve(items.size());
  for (const McqItem& item : items) prepared.push_back(prepare_question(model, prompts, item, scoring));
  // The batches first: the largest pass is checked against the device's memory before any runs.
  std::vector<std::pair<size_t, size_t>> ranges;  // [first, last) of each batch
  for (size_t first = 0; first < items.size();) {
    // Questions in order until the batch's rows (padded to the longest) would pass batch_tokens;
    // at least one question per batch. build_batch shares equal rows within a question.
    int64_t rows = 0, longest = 0;
    size_t last = first;
    for (; last < items.size(); ++last) {
      const PreparedQuestion& q = prepared[last];
      std::set<std::vector<int32_t>> distinct;  // the continuations' tails: one row each
      int64_t q_len = 0;
      for (const auto& c : q.conts()) {
        distinct.emplace(c.begin(), c.end() - 1);
        q_len = std::max<int64_t>(q_len, static_cast<int64_t>(q.tq.context.size() + c.size() - 1));
      }
      const auto q_rows = static_cast<int64_t>(distinct.size());
      if (last > first && (rows + q_rows) * std::max(longest, q_len) > batch_tokens) break;
      rows += q_rows;
      longest = std::max(longest, q_len);
    }
    ranges.emplace_back(first, last);
    first = last;
  }
  // Built once (their ids are small next to the model): planned on a device, then run.
  std::vector<QuestionBatch> batches;
  for (const auto& [first, last] : ranges) {
    std::vector<const PreparedQuestion*> qs;
    for (size_t i = first; i < last; ++i) qs.push_back(&prepared[i]);
    batches.push_back(build_batch(std::move(qs)));
  }
  backend::Backend& be = model.backend();
  if (!be.device().is_cpu()) {
    model::InferencePlan largest;
    model::InferenceShape largest_shape;
    for (const QuestionBatch& qb : batches) {
      const model::InferenceShape s = qb.shape();
      const model::InferencePlan p = model::plan_inference(model.config(), static_cast<double>(be.resident_bytes()),
                                                           model.lora(), s, be.precision());
      if (p.total() > largest.total()) {
        largest = p;
        largest_shape = s;
      }
    }
    // An adapter goes up to the device at its first use: resident_bytes() is the base weights
    // until then (and both after).
    model::refuse_if_inference_too_large(
        largest, "scoring " + std::to_string(items.size()) + " question(s) (the largest pass: " +
                     std::to_string(largest_shape.cache_rows) + " rows of " + std::to_string(largest_shape.cache_len) +
                     " tokens)",
        be.device().str(), static_cast<double>(be.free_memory()), static_cast<double>(be.resident_bytes()),
        "the questions' length (few-shot examples, the prompt)");
    be.plan_memory(static_cast<int64_t>(largest.total()));  // the buffer cache stays within it
  }
  std::vector<QuestionResult> out(items.size());
  size_t done = 0;
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [first, last] = ranges[k];
    std::vector<std::vector<double>> logliks;
    for (size_t i = first; i < last; ++i) logliks.emplace_back(prepared[i].conts().size(), 0.0);
    score_batch(model, batches[k], logliks);
    for (size_t i = first; i < last; ++i) {
      out[i] = finish_question(items[i], scoring, prepared[i], std::move(logliks[i - first])).result;
      ++done;
      if (progress) progress(done, items.size());
    }
  }
  return out;
}

std::vector<QuestionResult> score_questions(model::LlamaModel& model, const PromptRenderer& prompts,
                                            const std::vector<McqItem>& items, Scoring scoring,
                                            const std::function<void(size_t, size_t)>& progress) {
  // A device runs many questions per forward pass; the CPU one question per thread (below).
  if (!model.backend().device().is_cpu())
    return score_questions_batched(model, prompts, items, scoring, kDeviceBatchTokens, progress);
  const auto n = static_cast<int64_t>(items.size());
  std::vector<QuestionResult> out(items.size());
  // Questions are independent, so with enough of them each thread scores whole questions:
  // inside this parallel region every op runs on its calling thread alone (nested OpenMP
  // regions get one thread, OpenBLAS runs serially), so a forward crosses no barrier and no
  // thread waits on another. Splitting each small op over the threads instead spent most of
  // the CPU time spinning at barriers (SmolLM2: 9 heads, 3 panels of k_proj for 2 threads).
  // Fewer questions than threads: one at a time, each op over all threads (whole questions
  // would leave threads idle; a large model's question then still uses every core). Each
  // question's numbers do not depend on which way it ran.
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

}  // namespace medtune::eval
