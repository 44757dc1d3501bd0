// Scoring multiple-choice questions by log-likelihood, as lm-evaluation-harness does:
//   letter  the log-probability of each option's letter continuation (" A" ..) after the prompt;
//           prediction = argmax. One forward pass over the prompt serves every option.
//   text    the summed log-probability of each option's text as the continuation; acc = argmax,
//           acc_norm = argmax of loglik / (characters of the option), lm-eval's definitions.
//           The prompt is computed once; its keys/values are copied into one cache row per
//           option and all options continue from there in one batched pass.
#pragma once

#include <functional>
#include <vector>

#include "eval/metrics.h"
#include "eval/prompt.h"
#include "model/llama.h"

namespace medtune::eval {

enum class Scoring { letter, text };
Scoring parse_scoring(const std::string& name);

struct ScoredQuestion {
  QuestionResult result;
  int64_t context_tokens = 0;
};

// Scores one question.
ScoredQuestion score_question(model::LlamaModel& model, const PromptRenderer& prompts,
                              const McqItem& item, Scoring scoring);

// Scores every item; results in item order. On the CPU, with at least 4 questions per OpenMP
// thread the threads score different questions at once (each question's numbers are the same
// either way); the first error in item order is rethrown once the questions in flight are done.
// On a device backend, score_questions_batched with 4096 tokens per pass. `progress(done, total)`
// (may be empty) is called after each question, one call at a time.
std::vector<QuestionResult> score_questions(
    model::LlamaModel& model, const PromptRenderer& prompts, const std::vector<McqItem>& items,
    Scoring scoring, const std::function<void(size_t, size_t)>& progress = {});

// Several questions per forward pass: rows of context + continuation, right-padded, up to
// `batch_tokens` padded tokens per pass (at least one question), options with equal rows sharing
// one (letter scoring: one row per question). The same log-likelihoods as score_question to fp32
// summation order (the batch's shapes differ), and the same lm-eval truncation. On a device the
// batches are formed first and the largest pass is planned (model/inference_plan.h): a plan the
// device's free memory cannot hold is refused (BadInput) before any pass runs.
std::vector<QuestionResult> score_questions_batched(
    model::LlamaModel& model, const PromptRenderer& prompts, const std::vector<McqItem>& items,
    Scoring scoring, int64_t batch_tokens, const std::function<void(size_t, size_t)>& progress = {});

}  // namespace medtune::eval
