// The statistics an evaluation report rests on, each with its definition written down so that a
// reader can recompute it. Reference values: tests/fixtures/eval/stats_reference.json, made by
// tools/make_eval_fixtures.py with statsmodels/scipy (and, for ECE, a literal transcription of
// Guo et al.'s reference code, since neither library has one).
#pragma once

#include <cstdint>
#include <vector>

namespace medtune::eval {

// Two-sided 95%: the normal quantile at 0.975, as scipy.stats.norm.ppf(0.975) prints it.
inline constexpr double kZ95 = 1.959963984540054;

struct Interval {
  double lo = 0.0;
  double hi = 1.0;
};

// Wilson score interval for k successes in n trials (statsmodels proportion_confint(method=
// "wilson")). Chosen over the normal ("Wald") interval because it stays inside [0, 1] and keeps
// its coverage near 0 and n, where Wald collapses to a zero-width interval.
//   centre = (k + z^2/2) / (n + z^2),  half = z / (n + z^2) * sqrt(k (n - k) / n + z^2 / 4)
// n == 0 gives [0, 1] (no data, no information). Throws BadInput unless 0 <= k <= n.
Interval wilson_interval(int64_t k, int64_t n, double z = kZ95);

// Exact McNemar test on paired outcomes: b = pairs where A is right and B wrong, c = the reverse.
// Under H0 (equal accuracy) b ~ Binomial(b + c, 1/2); the two-sided p-value is
//   min(1, 2 * P[X <= min(b, c)]),
// as statsmodels.stats.contingency_tables.mcnemar(table, exact=True). b = c = 0 gives p = 1.
struct McNemarResult {
  int64_t b = 0;
  int64_t c = 0;
  int64_t statistic = 0;  // min(b, c), statsmodels' "statistic" for the exact test
  double p_value = 1.0;
};
McNemarResult mcnemar_exact(int64_t b, int64_t c);

// One equal-width confidence bin of a reliability diagram: (lo, hi], the first one [0, hi].
struct ReliabilityBin {
  double lo = 0.0;
  double hi = 0.0;
  int64_t count = 0;
  double mean_confidence = 0.0;  // 0 when count == 0
  double accuracy = 0.0;         // 0 when count == 0
};

// Expected calibration error (Guo et al. 2017, "On Calibration of Modern Neural Networks"):
// confidences (the probability of the predicted option, i.e. the max option probability) are put
// in num_bins equal-width bins B_m = ((m-1)/M, m/M]; then
//   ECE = sum_m |B_m| / N * | acc(B_m) - conf(B_m) |
// where acc is the fraction correct and conf the mean confidence in the bin. Right-closed bins
// follow the paper's reference code (confidence > lo and <= hi); a confidence of exactly 0 goes
// to the first bin. MCE is the largest per-bin gap over non-empty bins.
struct Calibration {
  double ece = 0.0;
  double mce = 0.0;
  std::vector<ReliabilityBin> bins;
};
// Throws BadInput if the sizes differ, a confidence is outside [0, 1] or NaN, or num_bins < 1.
Calibration expected_calibration_error(const std::vector<double>& confidence,
                                       const std::vector<bool>& correct, int num_bins = 10);

// The accuracy of always answering the most frequent gold letter: what a model scores by learning
// the answer-key distribution and nothing about medicine. Ties go to the earlier letter.
struct LetterPrior {
  std::vector<int64_t> gold_counts;  // per letter
  int letter = 0;                    // index of the most frequent gold letter
  int64_t correct = 0;               // gold_counts[letter]
  double accuracy = 0.0;             // correct / n (0 for an empty set)
};
// Throws BadInput if a gold index is outside [0, num_options).
LetterPrior letter_prior(const std::vector<int>& gold, int num_options);

}  // namespace medtune::eval
