#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "eval/medqa.h"

namespace medtune::eval {

using nlohmann::json;

namespace {

Accuracy make_accuracy(int64_t correct, int64_t n) {
  Accuracy a;
  a.correct = correct;
  a.n = n;
  a.value = n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n);
  a.ci95 = wilson_interval(correct, n);
  return a;
}

std::string where(const QuestionResult& r) {
  return "question '" + r.id + "': ";
}

void check_result(const QuestionResult& r, int num_options) {
  const std::string range = "0-" + std::to_string(num_options - 1);
  if (r.gold < 0 || r.gold >= num_options)
    throw BadInput(where(r) + "gold " + std::to_string(r.gold) + " is not in " + range);
  if (r.pred < -1 || r.pred >= num_options)
    throw BadInput(where(r) + "pred " + std::to_string(r.pred) + " is not in " + range + " or -1");
  if (r.pred_norm < -1 || r.pred_norm >= num_options)
    throw BadInput(where(r) + "pred_norm " + std::to_string(r.pred_norm) + " is not in " + range +
                   " or -1");
  const auto n = static_cast<size_t>(num_options);
  if (!r.option_logprobs.empty() && r.option_logprobs.size() != n)
    throw BadInput(where(r) + std::to_string(r.option_logprobs.size()) + " option_logprobs for " +
                   std::to_string(n) + " options");
  if (!r.option_probs.empty()) {
    if (r.option_probs.size() != n)
      throw BadInput(where(r) + std::to_string(r.option_probs.size()) + " option_probs for " +
                     std::to_string(n) + " options");
    double sum = 0.0;
    for (double p : r.option_probs) {
      if (!(p >= 0.0 && p <= 1.0))
        throw BadInput(where(r) + "option probability " + std::to_string(p) + " not in [0, 1]");
      sum += p;
    }
    // 1e-4 admits probabilities written with ~6 significant digits; a real bug is far larger.
    if (std::abs(sum - 1.0) > 1e-4)
      throw BadInput(where(r) + "option_probs sum to " + std::to_string(sum) + ", not 1");
  }
}

}  // namespace

std::vector<double> softmax(const std::vector<double>& logprobs) {
  std::vector<double> p(logprobs.size(), 0.0);
  if (logprobs.empty()) return p;
  const double top = *std::max_element(logprobs.begin(), logprobs.end());
  if (!std::isfinite(top))
    throw BadInput("softmax: the largest option log-probability is " + std::to_string(top));
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logprobs[i] - top);
  for (double& v : p) v /= sum;
  return p;
}

Metrics compute_metrics(const std::vector<QuestionResult>& results, int num_options) {
  if (num_options < 2 || num_options > 26)
    throw BadInput("compute_metrics: num_options is " + std::to_string(num_options) +
                   ", not in 2-26");
  if (results.empty()) throw BadInput("compute_metrics: no question results");
  Metrics m;
  m.count = static_cast<int64_t>(results.size());
  m.num_options = num_options;
  m.pred_counts.assign(static_cast<size_t>(num_options), 0);

  size_t with_norm = 0;
  size_t with_probs = 0;
  for (const auto& r : results) {
    check_result(r, num_options);
    with_norm += r.pred_norm >= 0;
    with_probs += !r.option_probs.empty() || !r.option_logprobs.empty();
  }
  // Half-filled columns mean a bug upstream; a metric over a silent subset would mislead.
  if (with_norm != 0 && with_norm != results.size())
    throw BadInput("compute_metrics: pred_norm is set for " + std::to_string(with_norm) + " of " +
                   std::to_string(results.size()) + " questions; need all or none");
  if (with_probs != 0 && with_probs != results.size())
    throw BadInput("compute_metrics: option probabilities are present for " +
                   std::to_string(with_probs) + " of " + std::to_string(results.size()) +
                   " questions; need all or none");
  m.has_acc_norm = with_norm != 0;
  m.has_calibration = with_probs != 0;

  int64_t correct = 0;
  int64_t correct_norm = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> groups;  // name -> (correct, n)
  std::vector<int> gold;
  std::vector<double> confidence;
  std::vector<bool> top_correct;
  gold.reserve(results.size());
  for (const auto& r : results) {
    const bool right = r.pred == r.gold;
    correct += right;
    correct_norm += r.pred_norm == r.gold;
    auto& g = groups[r.meta_info.empty() ? "(none)" : r.meta_info];
    g.first += right;
    ++g.second;
    if (r.pred < 0)
      ++m.unanswered;
    else
      ++m.pred_counts[static_cast<size_t>(r.pred)];
    gold.push_back(r.gold);
    if (m.has_calibration) {
      const std::vector<double> probs =
          r.option_probs.empty() ? softmax(r.option_logprobs) : r.option_probs;
      const auto top = std::max_element(probs.begin(), probs.end());
      confidence.push_back(*top);
      top_correct.push_back(top - probs.begin() == r.gold);
    }
  }
  m.accuracy = make_accuracy(correct, m.count);
  if (m.has_acc_norm) m.acc_norm = make_accuracy(correct_norm, m.count);
  for (const auto& [name, g] : groups)
    m.by_meta_info.push_back({name, make_accuracy(g.first, g.second)});
  m.prior = letter_prior(gold, num_options);
  if (m.has_calibration) m.calibration = expected_calibration_error(confidence, top_correct);
  m.indistinguishable_from_prior = m.accuracy.ci95.lo <= m.prior.accuracy;
  return m;
}

json accuracy_json(const Accuracy& a) {
  return {{"correct", a.correct},
          {"n", a.n},
          {"value", a.value},
          {"ci95", {{"lo", a.ci95.lo}, {"hi", a.ci95.hi}, {"method", "wilson"}}}};
}

json metrics_json(const Metrics& m) {
  json letters = json::array();
  json gold_counts = json::array();
  json pred_counts = json::array();
  for (int i = 0; i < m.num_options; ++i) {
    letters.push_back(option_letter(i));
    gold_counts.push_back(m.prior.gold_counts[static_cast<size_t>(i)]);
    pred_counts.push_back(m.pred_counts[static_cast<size_t>(i)]);
  }
  json groups = json::array();
  for (const auto& g : m.by_meta_info) {
    json entry = accuracy_json(g.accuracy);
    entry["name"] = g.name;
    groups.push_back(entry);
  }
  json calibration = nullptr;
  if (m.has_calibration) {
    json bins = json::array();
    for (const auto& b : m.calibration.bins) {
      // Empty bins have no accuracy or confidence: null, not a misleading 0.
      bins.push_back({{"lo", b.lo},
                      {"hi", b.hi},
                      {"count", b.count},
                      {"mean_confidence", b.count ? json(b.mean_confidence) : json(nullptr)},
                      {"accuracy", b.count ? json(b.accuracy) : json(nullptr)}});
    }
    calibration = {{"ece", m.calibration.ece},
                   {"mce", m.calibration.mce},
                   {"num_bins", m.calibration.bins.size()},
                   {"confidence", "max option probability"},
                   {"bins", bins}};
  }
  return {{"count", m.count},
          {"num_options", m.num_options},
          {"accuracy", accuracy_json(m.accuracy)},
          {"acc_norm", m.has_acc_norm ? accuracy_json(m.acc_norm) : json(nullptr)},
          {"by_meta_info", groups},
          {"letter_distribution",
           {{"letters", letters},
            {"gold", gold_counts},
            {"predicted", pred_counts},
            {"unanswered", m.unanswered}}},
          {"letter_prior",
           {{"letter", option_letter(m.prior.letter)},
            {"correct", m.prior.correct},
            {"n", m.count},
            {"accuracy", m.prior.accuracy}}},
          {"calibration", calibration},
          {"indistinguishable_from_letter_prior", m.indistinguishable_from_prior}};
}

}  // namespace medtune::eval
