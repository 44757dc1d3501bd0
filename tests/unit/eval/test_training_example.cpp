// Training examples are built from exactly the continuation the scorer reads: the gold letter
// (answer_target: letter) or the gold option's text (answer_target: text), tokenized as lm-eval
// does (the tokens of context + continuation past those of the context).
#include <gtest/gtest.h>

#include "eval/medqa.h"
#include "eval/prompt.h"
#include "tokenizer/tokenizer.h"

namespace medtune::eval {
namespace {

McqItem item() {
  McqItem q;
  q.id = "q1";
  q.question = "Which drug is first-line for Briosbrul palsy?";
  q.options = {"Braexgercillin", "Vyxdraethvastin", "Novicillin", "Trothdaethcillin"};
  q.answer = 2;
  return q;
}

TEST(TrainingExample, AnswerIsTheScoredContinuation) {
  const auto tok = tokenizer::Tokenizer::from_tokenizer_json(MEDTUNE_SOURCE_DIR
                                                             "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
  const PromptRenderer r(PromptOptions{}, *tok, std::nullopt);
  const McqItem q = item();
  const TokenizedQuestion scored = r.tokenize(q, true);
  std::vector<int32_t> context, answer;

  r.training_example(q, context, answer);
  EXPECT_EQ(context, scored.context);
  EXPECT_EQ(answer, scored.letter_tokens[2]);
  EXPECT_EQ(tok->decode(answer), " C");

  r.training_example(q, context, answer, true);
  EXPECT_EQ(context, scored.context);
  EXPECT_EQ(answer, scored.text_tokens[2]);
  EXPECT_EQ(tok->decode(answer), " Novicillin");
  EXPECT_GT(answer.size(), 1u);  // a multi-token target, unlike the letter
}

}  // namespace
}  // namespace medtune::eval
