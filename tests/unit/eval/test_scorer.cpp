// The scorer against plain full forward passes of the real model (SmolLM2-135M GGUF): its shared
// prefix cache, batched option continuations and lm_head restricted to the scored rows give the
// log-likelihoods of context + continuation computed in one piece; and scoring questions in
// parallel (one question per thread) gives the numbers of scoring them one at a time.
// Runs when MEDTUNE_SMOLLM2_GGUF names the file (scripts/test.sh sets it).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "eval/prompt.h"
#include "eval/scorer.h"
#include "io/checkpoint.h"
#include "model/inference_plan.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"
#include "unit/model/simulated_device.h"

namespace medtune::eval {
namespace {

std::string model_path() {
  const char* p = std::getenv("MEDTUNE_SMOLLM2_GGUF");
  return p != nullptr && std::filesystem::exists(p) ? p : "";
}

// lm-eval prompts through SmolLM2's tokenizer (the committed fixture), shared by the tests.
const PromptRenderer& smollm2_prompts() {
  static const auto tok = tokenizer::Tokenizer::from_tokenizer_json(MEDTUNE_SOURCE_DIR
                                                                    "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
  static const PromptRenderer prompts(PromptOptions{}, *tok, std::nullopt);
  return prompts;
}

// Fictional questions (the project ships no MedQA text); options of different token lengths
// so that the batched continuations are padded.
std::vector<McqItem> items(size_t n) {
  const std::vector<std::string> drugs = {"Braexgercillin", "Vyxdraethvastin", "Novicillin",
                                          "Trothdaethcillin plus supportive care", "Zel", "Quorastatin"};
  std::vector<McqItem> out;
  for (size_t i = 0; i < n; ++i) {
    McqItem q;
    q.id = "q" + std::to_string(i);
    q.question = "A " + std::to_string(30 + i) + "-year-old presents with Briosbrul palsy of grade " +
                 std::to_string(i % 3 + 1) + ". Which drug is first-line?";
    for (size_t o = 0; o < 4; ++o) q.options.push_back(drugs[(i + o) % drugs.size()]);
    q.answer = static_cast<int>(i % 4);
    out.push_back(q);
  }
  return out;
}

// log softmax(row)[id] in double.
double log_prob(const float* row, int64_t V, int32_t id) {
  double mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[id]) - mx - std::log(sum);
}

// Both sides are fp32 forwards of different batch shapes (BLAS blocking differs), so they agree
// to fp32 rounding: ~1e-5 on log-likelihoods of magnitude ~10. A position off by one, a padding
// row scored or a row of the wrong option is off by far more (> 0.1 on these questions).
constexpr double kTol = 1e-4;

TEST(ScorerSlow, OptionLogliksEqualFullForwardOfContextPlusContinuation) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const PromptRenderer& prompts = smollm2_prompts();
  model::LlamaModel m(io::open_checkpoint(path));
  const int64_t V = m.config().vocab_size;
  // One thread: this test is about the numbers; threads cost barriers on a loaded machine.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  for (const McqItem& q : items(2)) {
    const TokenizedQuestion tq = prompts.tokenize(q, true);
    const auto P = static_cast<int64_t>(tq.context.size());
    const ScoredQuestion letter = score_question(m, prompts, q, Scoring::letter);
    const ScoredQuestion text = score_question(m, prompts, q, Scoring::text);
    const auto ctx_logits = m.logits(model::Batch{1, P, tq.context, {}});  // (P, V)
    bool padded = false;
    for (size_t o = 0; o < q.options.size(); ++o) {
      SCOPED_TRACE(q.id + " option " + std::to_string(o));
      EXPECT_NEAR(letter.result.option_logprobs[o],
                  log_prob(ctx_logits.data() + (P - 1) * V, V, tq.letter_tokens[o][0]), kTol);
      std::vector<int32_t> ids = tq.context;
      const auto& cont = tq.text_tokens[o];
      ids.insert(ids.end(), cont.begin(), cont.end());
      const auto T = static_cast<int64_t>(ids.size());
      const auto logits = m.logits(model::Batch{1, T, ids, {}});  // (T, V)
      double want = 0;
      for (size_t j = 0; j < cont.size(); ++j)
        want += log_prob(logits.data() + (P - 1 + static_cast<int64_t>(j)) * V, V, cont[j]);
      EXPECT_NEAR(text.result.option_logprobs[o], want, kTol);
      padded |= cont.size() != tq.text_tokens[0].size();
    }
    EXPECT_TRUE(padded) << "the options should differ in token length, so that padding is exercised";
  }
  omp_set_num_threads(saved);
}

TEST(ScorerSlow, QuestionsInParallelGiveTheNumbersOfOneAtATime) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const PromptRenderer& prompts = smollm2_prompts();
  model::LlamaModel m(io::open_checkpoint(path));
  const auto qs = items(8);  // 4 per thread at 2 threads: the per-question path (from 1 per thread)
  const int saved = omp_get_max_threads();
  for (const Scoring s : {Scoring::letter, Scoring::text}) {
    omp_set_num_threads(1);
    const auto one = score_questions(m, prompts, qs, s);
    omp_set_num_threads(2);
    std::vector<size_t> seen;
    const auto par = score_questions(m, prompts, qs, s, [&](size_t done, size_t total) {
      EXPECT_EQ(total, qs.size());
      seen.push_back(done);
    });
    ASSERT_EQ(par.size(), qs.size());
    for (size_t i = 0; i < qs.size(); ++i) {
      SCOPED_TRACE("question " + std::to_string(i));
      EXPECT_EQ(seen[i], i + 1);  // progress counts up, one call at a time
      EXPECT_EQ(par[i].id, qs[i].id);  // results in item order
      // Every op of a question runs on one thread either way: the same sums, bit for bit.
      EXPECT_EQ(par[i].option_logprobs, one[i].option_logprobs);
      EXPECT_EQ(par[i].pred, one[i].pred);
      EXPECT_EQ(par[i].pred_norm, one[i].pred_norm);
    }
  }
  omp_set_num_threads(saved);
}

// Several questions per forward pass (right-padded rows; letter scoring shares one row per
// question) give the log-likelihoods of scoring each alone, to fp32 summation order (kTol, as
// above: the batch shapes differ), whatever the batch size: one question per pass, a few, all.
TEST(ScorerSlow, BatchedQuestionsGiveTheNumbersOfOneAtATime) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const PromptRenderer& prompts = smollm2_prompts();
  model::LlamaModel m(io::open_checkpoint(path));
  const auto qs = items(4);
  // 200 tokens: two questions per pass by letter, one by option text (four rows); 100000: all.
  for (const Scoring s : {Scoring::letter, Scoring::text}) {
    const auto want = score_questions(m, prompts, qs, s);
    for (const int64_t batch_tokens : {int64_t{200}, int64_t{100000}}) {
      std::vector<size_t> seen;
      const auto got = score_questions_batched(m, prompts, qs, s, batch_tokens, [&](size_t done, size_t) { seen.push_back(done); });
      ASSERT_EQ(got.size(), qs.size());
      EXPECT_EQ(seen.size(), qs.size());
      for (size_t i = 0; i < qs.size(); ++i) {
        SCOPED_TRACE("batch_tokens " + std::to_string(batch_tokens) + ", question " + std::to_string(i));
        EXPECT_EQ(got[i].id, want[i].id);
        for (size_t o = 0; o < want[i].option_logprobs.size(); ++o)
          EXPECT_NEAR(got[i].option_logprobs[o], want[i].option_logprobs[o], kTol);
        EXPECT_EQ(got[i].pred, want[i].pred);
        EXPECT_EQ(got[i].pred_norm, want[i].pred_norm);
      }
    }
  }
}

// The scorer on a backend with memory of its own (unit/model/simulated_device.h: the checks a GPU
// backend needs, computed by the CPU ops), where score_questions takes the batched path: the CPU
// backend's batched numbers bit for bit (the prefix-cache path of score_question too: SmolLM2's
// GGUF q/k rows are un-permuted there and its quantized tensors read from their resident copies).
TEST(ScorerSlow, OnADeviceWithItsOwnMemoryEqualsTheCpuBackend) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const PromptRenderer& prompts = smollm2_prompts();
  static testing::SimulatedDevice device;  // outlives the per-thread layer scratch it holds
  model::LlamaModel cpu_model(io::open_checkpoint(path));
  model::LlamaModel dev_model(io::open_checkpoint(path), model::WeightQuant::kNone, device);
  ASSERT_TRUE(dev_model.weights().qk_rows_permuted) << "the GGUF path should be exercised";
  const auto qs = items(2);
  for (const Scoring s : {Scoring::letter, Scoring::text}) {
    const auto want = score_questions_batched(cpu_model, prompts, qs, s, 4096);
    const auto got = score_questions(dev_model, prompts, qs, s);
    for (size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(got[i].option_logprobs, want[i].option_logprobs);
    for (size_t i = 0; i < qs.size(); ++i)
      EXPECT_EQ(score_question(dev_model, prompts, qs[i], s).result.option_logprobs,
                score_question(cpu_model, prompts, qs[i], s).result.option_logprobs);
  }
}

// On a device the scorer plans its largest pass (model/inference_plan.h) before it runs any:
// on a device of exactly the plan's size (the simulated device has no dequantization workspace,
// the rest is what the passes hold) it scores, and its peak is the plan's; one byte less and it
// refuses, naming the device, before anything beyond the loaded weights is allocated.
TEST(ScorerSlow, OnADeviceTheLargestPassIsPlannedAndRefusedBeforeItRuns) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const PromptRenderer& prompts = smollm2_prompts();
  const auto qs = items(5);
  static testing::SimulatedDevice roomy, exact, short_by_one;  // outlive the layer scratch on them
  // The GPU backend's own workspace, which the simulated device does not have, for the largest
  // pass (4 rows of 76 tokens, 24 of them logit rows: the refusal below names it): one
  // dequantized weight chunk, staged indices and buffer rounding (device_workspace_bytes), the
  // last layer's row gather (24 rows of max(C, NH HD) floats), the GEMM attention's scores.
  const auto workspace = [](const model::LlamaModel& m) {
    const auto& c = m.config();
    const auto widest =
        static_cast<double>(std::max(c.hidden_size, c.num_attention_heads * c.head_dim));
    return model::device_workspace_bytes(c, 4 * 76, backend::Precision::kFp32) + 4.0 * 24 * widest +
           model::device_attention_workspace_bytes(c, 4, 76, 76, /*backward=*/false);
  };
  int64_t peak = 0;
  double plan_total = 0;
  {
    model::LlamaModel m(io::open_checkpoint(path), model::WeightQuant::kNone, roomy);
    score_questions_batched(m, prompts, qs, Scoring::text, 256);  // several passes of different shapes
    peak = roomy.peak_bytes();
    plan_total = static_cast<double>(peak) + workspace(m);
  }
  {
    exact.set_capacity(static_cast<int64_t>(plan_total));
    model::LlamaModel m(io::open_checkpoint(path), model::WeightQuant::kNone, exact);
    EXPECT_NO_THROW(score_questions_batched(m, prompts, qs, Scoring::text, 256));
    EXPECT_EQ(exact.peak_bytes(), peak);
  }
  short_by_one.set_capacity(static_cast<int64_t>(plan_total) - 1);
  model::LlamaModel m(io::open_checkpoint(path), model::WeightQuant::kNone, short_by_one);
  const int64_t weights = short_by_one.live_bytes();
  try {
    score_questions_batched(m, prompts, qs, Scoring::text, 256);
    FAIL() << "no refusal";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("scoring 5 question(s) (the largest pass: 4 rows of 76 tokens)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("on device gpu:7"), std::string::npos) << msg;
  }
  EXPECT_EQ(short_by_one.peak_bytes(), weights) << "nothing allocated before the refusal";
}

}  // namespace
}  // namespace medtune::eval
