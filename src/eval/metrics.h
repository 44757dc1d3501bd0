// Metrics of one evaluation run, computed from per-question results: accuracy with its Wilson
// interval, acc_norm, a breakdown by meta_info, letter distributions, the letter-prior baseline and
// calibration. Everything a report shows is here, so the HTML and JSON reports cannot disagree.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/stats.h"

namespace medtune::eval {

struct QuestionResult {
  std::string id;
  std::string meta_info;
  int gold = -1;
  int pred = -1;                        // -1: the model gave no usable answer (counted wrong)
  std::vector<double> option_logprobs;  // per option; may be empty
  std::vector<double> option_probs;     // softmax over options; derived from logprobs if empty
  int pred_norm = -1;                   // acc_norm prediction when option-text scoring
  int64_t truncated_tokens = 0;         // prompt tokens dropped from the left to fit the context
};

// Accuracy of a group of questions.
struct Accuracy {
  int64_t correct = 0;
  int64_t n = 0;
  double value = 0.0;  // correct / n
  Interval ci95;       // Wilson
};

struct GroupAccuracy {
  std::string name;  // meta_info; "(none)" when empty
  Accuracy accuracy;
};

struct Metrics {
  int64_t count = 0;
  int num_options = 0;
  Accuracy accuracy;
  bool has_acc_norm = false;  // every result has pred_norm >= 0
  Accuracy acc_norm;
  std::vector<GroupAccuracy> by_meta_info;  // sorted by name
  std::vector<int64_t> pred_counts;         // per letter
  int64_t unanswered = 0;                   // pred == -1
  LetterPrior prior;
  bool has_calibration = false;  // every result has option probabilities
  Calibration calibration;
  // The model's 95% interval reaches down to (or below) the letter-prior accuracy: the run does
  // not show that the model knows more than the answer-key distribution.
  bool indistinguishable_from_prior = false;
};

// Validates each result (gold in range, pred in range or -1, option vectors of num_options
// entries, probabilities that sum to 1 within 1e-4) and throws BadInput naming the question id.
// Results with option_logprobs but no option_probs get probabilities by a stable softmax.
// Calibration uses the max option probability as the confidence and the argmax's correctness
// (ties to the earlier letter); with the scorer's pred = argmax this is pred's correctness.
Metrics compute_metrics(const std::vector<QuestionResult>& results, int num_options);

// Softmax over option log-probabilities, shifted by the maximum (no overflow); -inf gives 0.
std::vector<double> softmax(const std::vector<double>& logprobs);

// The JSON form the reports use (see docs/evaluation.md for the schema).
nlohmann::json metrics_json(const Metrics& metrics);
nlohmann::json accuracy_json(const Accuracy& accuracy);

}  // namespace medtune::eval
