#include "eval/stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace medtune::eval {

Interval wilson_interval(int64_t k, int64_t n, double z) {
  if (n < 0 || k < 0 || k > n)
    throw BadInput("wilson_interval: need 0 <= k <= n, got k=" + std::to_string(k) +
                   " n=" + std::to_string(n));
  if (n == 0) return {0.0, 1.0};
  const double kd = static_cast<double>(k);
  const double nd = static_cast<double>(n);
  const double z2 = z * z;
  const double centre = (kd + z2 / 2.0) / (nd + z2);
  const double half = z / (nd + z2) * std::sqrt(kd * (nd - kd) / nd + z2 / 4.0);
  // At k = 0 or k = n the bound is 0 or 1 in exact arithmetic; clamp the rounding residue.
  return {std::clamp(centre - half, 0.0, 1.0), std::clamp(centre + half, 0.0, 1.0)};
}

McNemarResult mcnemar_exact(int64_t b, int64_t c) {
  if (b < 0 || c < 0)
    throw BadInput("mcnemar_exact: counts must be >= 0, got b=" + std::to_string(b) +
                   " c=" + std::to_string(c));
  McNemarResult r;
  r.b = b;
  r.c = c;
  r.statistic = std::min(b, c);
  const int64_t n = b + c;
  if (n == 0) return r;  // no discordant pairs: no evidence either way, p = 1
  // P[X <= k] for X ~ Binomial(n, 1/2) = sum_i C(n, i) / 2^n. The terms are summed in log space
  // relative to the largest one (i = k, the tail's nearest term to the mode) so that n in the
  // thousands neither overflows C(n, i) nor underflows 2^-n before the sum is formed.
  const double nd = static_cast<double>(n);
  const double log_half_n = -nd * std::log(2.0);
  auto log_term = [&](int64_t i) {
    const double id = static_cast<double>(i);
    return std::lgamma(nd + 1.0) - std::lgamma(id + 1.0) - std::lgamma(nd - id + 1.0) + log_half_n;
  };
  const int64_t k = r.statistic;
  const double top = log_term(k);
  double sum = 0.0;
  for (int64_t i = 0; i <= k; ++i) sum += std::exp(log_term(i) - top);
  r.p_value = std::min(1.0, 2.0 * std::exp(top + std::log(sum)));
  return r;
}

Calibration expected_calibration_error(const std::vector<double>& confidence,
                                       const std::vector<bool>& correct, int num_bins) {
  if (confidence.size() != correct.size())
    throw BadInput("expected_calibration_error: " + std::to_string(confidence.size()) +
                   " confidences but " + std::to_string(correct.size()) + " outcomes");
  if (num_bins < 1)
    throw BadInput("expected_calibration_error: num_bins must be >= 1, got " +
                   std::to_string(num_bins));
  Calibration cal;
  cal.bins.resize(static_cast<size_t>(num_bins));
  std::vector<double> conf_sum(cal.bins.size(), 0.0);
  std::vector<int64_t> right(cal.bins.size(), 0);
  for (size_t m = 0; m < cal.bins.size(); ++m) {
    cal.bins[m].lo = static_cast<double>(m) / num_bins;
    cal.bins[m].hi = static_cast<double>(m + 1) / num_bins;
  }
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double p = confidence[i];
    if (!(p >= 0.0 && p <= 1.0))
      throw BadInput("expected_calibration_error: confidence #" + std::to_string(i) + " is " +
                     std::to_string(p) + ", not in [0, 1]");
    // Bin m holds (lo, hi]: the first m with p <= hi. Comparing against the same lo/hi values
    // that are reported (rather than computing ceil(p * M) - 1) keeps edge cases such as
    // p = 0.3 in the bin a reader expects, (0.2, 0.3].
    size_t m = 0;
    while (m + 1 < cal.bins.size() && p > cal.bins[m].hi) ++m;
    ++cal.bins[m].count;
    conf_sum[m] += p;
    if (correct[i]) ++right[m];
  }
  const double total = static_cast<double>(confidence.size());
  for (size_t m = 0; m < cal.bins.size(); ++m) {
    ReliabilityBin& bin = cal.bins[m];
    if (bin.count == 0) continue;
    const double cnt = static_cast<double>(bin.count);
    bin.mean_confidence = conf_sum[m] / cnt;
    bin.accuracy = static_cast<double>(right[m]) / cnt;
    const double gap = std::abs(bin.accuracy - bin.mean_confidence);
    cal.ece += cnt / total * gap;
    cal.mce = std::max(cal.mce, gap);
  }
  return cal;
}

LetterPrior letter_prior(const std::vector<int>& gold, int num_options) {
  if (num_options < 1)
    throw BadInput("letter_prior: num_options must be >= 1, got " + std::to_string(num_options));
  LetterPrior prior;
  prior.gold_counts.assign(static_cast<size_t>(num_options), 0);
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] < 0 || gold[i] >= num_options)
      throw BadInput("letter_prior: gold #" + std::to_string(i) + " is " + std::to_string(gold[i]) +
                     ", not in 0-" + std::to_string(num_options - 1));
    ++prior.gold_counts[static_cast<size_t>(gold[i])];
  }
  // max_element returns the first maximum: ties go to the earlier letter, deterministically.
  const auto best = std::max_element(prior.gold_counts.begin(), prior.gold_counts.end());
  prior.letter = static_cast<int>(best - prior.gold_counts.begin());
  prior.correct = *best;
  prior.accuracy =
      gold.empty() ? 0.0 : static_cast<double>(prior.correct) / static_cast<double>(gold.size());
  return prior;
}

}  // namespace medtune::eval
