// How a multiple-choice question becomes model input, for scoring and for training alike:
//   lm_eval  lm-evaluation-harness `medqa_4options`:
//            "Question: {q}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer:"  continuations " A" .. " D"
//   chat     the model's own chat template: system prompt, the question with lettered options as
//            the user turn, generation prompt; the letter is the assistant's first token
//   custom   a text file with placeholders {question}, {options} ("A. ..\nB. .."), {A}, {B}, ..;
//            continuations " A" .. as lm_eval
// Few-shot (any format but chat): k solved examples from a pool file, each rendered as
// context + " " + letter, joined by "\n\n" before the question (lm-eval's delimiters), drawn as
// lm-evaluation-harness draws them (fewshot_draws below): a different k for every question.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "eval/medqa.h"
#include "eval/tasks.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace medtune::eval {

enum class PromptFormat { lm_eval, chat, custom };
PromptFormat parse_prompt_format(const std::string& name);  // BadInput lists the valid names
const char* prompt_format_name(PromptFormat f);

inline constexpr const char* kDefaultSystemPrompt =
    "You are a clinician; choose the single best option.";

struct PromptOptions {
  PromptFormat format = PromptFormat::lm_eval;
  std::string system_prompt = kDefaultSystemPrompt;  // chat only
  int fewshot_k = 0;
  std::string fewshot_pool;  // MCQ JSONL file the examples are drawn from
  uint64_t fewshot_seed = 1234;  // lm-eval's default fewshot_random_seed
  std::string custom_template_path;  // custom only
  // An lm-eval task (eval/tasks.h): its own prompt replaces the format's (lm_eval only, zero-shot).
  const TaskSpec* task = nullptr;
};

// A question rendered as text: the shared context and one continuation per option.
struct RenderedQuestion {
  std::string context;
  std::vector<std::string> letter_continuations;  // " A" .. (chat: "A" ..)
  std::vector<std::string> text_continuations;    // " " + option text (option-text scoring)
};

// A question tokenized the way lm-eval does it: the continuation's tokens are those of
// encode(context + continuation) past encode(context), so a merge across the boundary is seen.
struct TokenizedQuestion {
  std::vector<int32_t> context;                      // with BOS when the tokenizer adds one
  std::vector<std::vector<int32_t>> letter_tokens;   // per option
  std::vector<std::vector<int32_t>> text_tokens;     // per option (empty unless asked for)
};

// lm-evaluation-harness's few-shot draw (api/samplers.py ContextSampler.sample, seeded once per
// task by set_fewshot_seed(fewshot_random_seed = 1234)): one Python random.Random(seed) for the
// whole run, and for each question, in order, rnd.sample(pool, k). When the pool is the question
// file itself (lm-eval: fewshot split == test split), k + 1 are drawn, every drawn record equal
// to the question is dropped and the first k of the rest kept. Returns, per question, the pool
// indices in prompt order. Bit-exact with Python (eval/python_random.h); as the draws form one
// stream, a question's examples depend on its position: --limit N keeps the first N questions'.
std::vector<std::vector<size_t>> fewshot_draws(const std::vector<McqItem>& pool,
                                               const std::vector<McqItem>& questions, int k,
                                               uint64_t seed, bool pool_is_question_file);

class PromptRenderer {
 public:
  // `chat_template` is needed for PromptFormat::chat (BadInput otherwise).
  PromptRenderer(PromptOptions options, const tokenizer::Tokenizer& tok,
                 std::optional<tokenizer::ChatTemplate> chat_template);

  // With few-shot, draws every question's examples (fewshot_draws); call it once with the
  // questions of the run, in order, before render/tokenize. No-op without few-shot.
  void draw_fewshot(const McqSet& questions);

  RenderedQuestion render(const McqItem& item) const;
  TokenizedQuestion tokenize(const McqItem& item, bool with_option_text) const;
  // For training: context tokens and the target tokens of the gold answer: its letter, or with
  // option_text its option's text; exactly the continuation the scorer reads in that mode.
  void training_example(const McqItem& item, std::vector<int32_t>& context, std::vector<int32_t>& answer,
                        bool option_text = false) const;
  const PromptOptions& options() const { return opt_; }

 private:
  std::string question_body(const McqItem& item) const;   // question + lettered options
  std::string context_text(const McqItem& item) const;    // without few-shot prefix
  std::vector<int32_t> continuation(const std::string& context, const std::string& cont) const;

  PromptOptions opt_;
  const tokenizer::Tokenizer& tok_;
  std::optional<tokenizer::ChatTemplate> chat_;
  std::string custom_template_;  // custom only: text with {question} {options} {A} .. placeholders
  std::vector<McqItem> fewshot_pool_;
  // Per question id: its rendered examples, each followed by "\n\n" (draw_fewshot).
  std::unordered_map<std::string, std::string> fewshot_prefix_;
};

}  // namespace medtune::eval
