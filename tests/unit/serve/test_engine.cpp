// serve::Engine's continuous batching: concurrent greedy jobs (different prompt lengths, one past a
// prompt chunk, different adapters, one with prompt log-probabilities) get exactly what each gets
// alone; a cancelled job frees its slot; a full queue answers 503.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "serve/api_error.h"
#include "serve/engine.h"
#include "support/random_adapter.h"

namespace medtune::serve {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

model::LlamaModel invariant_model() {
  return model::LlamaModel(io::open_checkpoint(kFixture), model::WeightQuant::kNone,
                           backend::batch_invariant(backend::cpu()));
}

std::shared_ptr<const Adapter> adapter(const model::LlamaModel& m, uint64_t seed) {
  auto a = std::make_shared<Adapter>();
  a->name = "a" + std::to_string(seed);
  a->weights = std::make_unique<model::LoraWeights>(testing::random_adapter(m.config(), seed));
  return a;
}

std::vector<int32_t> prompt(int64_t n, int32_t seed) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 7 + i * 13) % 97 + 3));
  return p;
}

// Everything a job produced, in order.
struct Result {
  std::vector<TokenLogprob> tokens;
  std::vector<TokenLogprob> prompt;
  FinishReason finish = FinishReason::kError;
};
Result collect(Job& job) {
  Result r;
  Job::Event e;
  while (job.next(e)) {
    if (e.kind == Job::Event::kToken) r.tokens.push_back(e.token);
    else if (e.kind == Job::Event::kPrompt) r.prompt = e.prompt;
    else r.finish = e.finish;
  }
  return r;
}

void expect_same(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << what << " " << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << what << " " << i;  // bit for bit
    EXPECT_EQ(a[i].top, b[i].top) << what << " " << i;
  }
}

TEST(Engine, ConcurrentGreedyJobsGetWhatEachGetsAlone) {
  model::LlamaModel m = invariant_model();
  const auto ad1 = adapter(m, 1), ad2 = adapter(m, 2);
  std::vector<JobSpec> specs(5);
  specs[0].prompt = prompt(5, 1);
  specs[0].max_tokens = 9;
  specs[1].prompt = prompt(9, 2);
  specs[1].adapter = ad1;
  specs[1].max_tokens = 6;
  specs[1].top_logprobs = 0;
  specs[2].prompt = prompt(kPrefillChunk + 12, 3);  // two prompt chunks
  specs[2].adapter = ad2;
  specs[2].max_tokens = 5;
  specs[2].prompt_logprobs = true;
  specs[2].top_logprobs = 2;
  specs[3].prompt = prompt(3, 4);
  specs[3].adapter = ad1;
  specs[3].max_tokens = 12;
  specs[3].top_logprobs = 0;
  specs[4].prompt = prompt(7, 5);  // max_tokens 0: the prompt only
  specs[4].prompt_logprobs = true;
  specs[4].top_logprobs = 0;

  std::vector<Result> alone;
  {
    Engine engine(m, {2 * 256, 2, 64});
    for (const JobSpec& s : specs) {
      auto job = std::make_shared<Job>(s);
      engine.submit(job);
      alone.push_back(collect(*job));
    }
  }
  Engine engine(m, {4 * 256, 4, 64});  // 4 slots for 5 jobs: one waits for a free slot
  std::vector<std::shared_ptr<Job>> jobs;
  for (const JobSpec& s : specs) {
    jobs.push_back(std::make_shared<Job>(s));
    engine.submit(jobs.back());
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const Result r = collect(*jobs[i]);
    const std::string what = "job " + std::to_string(i);
    EXPECT_EQ(r.finish, FinishReason::kLength) << what;
    EXPECT_EQ(static_cast<int64_t>(r.tokens.size()), specs[i].max_tokens) << what;
    expect_same(r.tokens, alone[i].tokens, what + " tokens");
    expect_same(r.prompt, alone[i].prompt, what + " prompt");
  }
  EXPECT_EQ(alone[2].prompt.size(), specs[2].prompt.size() - 1);
  // The adapters change the answer (else the test could not tell them apart).
  JobSpec base = specs[1];
  base.adapter = nullptr;
  auto job = std::make_shared<Job>(base);
  engine.submit(job);
  const Result r = collect(*job);
  bool differs = false;
  for (size_t i = 0; i < r.tokens.size(); ++i) differs |= r.tokens[i].logprob != alone[1].tokens[i].logprob;
  EXPECT_TRUE(differs);
}

TEST(Engine, CancelledJobFreesItsSlot) {
  model::LlamaModel m = invariant_model();
  Engine engine(m, {256, 1, 64});
  JobSpec s;
  s.prompt = prompt(4, 1);
  s.max_tokens = 200;
  auto first = std::make_shared<Job>(s);
  engine.submit(first);
  Job::Event e;
  ASSERT_TRUE(first->next(e));
  EXPECT_EQ(e.kind, Job::Event::kToken);
  first->cancel();
  EXPECT_EQ(collect(*first).finish, FinishReason::kCancelled);
  // The only slot is free again: the next job runs to its end.
  s.max_tokens = 3;
  auto second = std::make_shared<Job>(s);
  engine.submit(second);
  auto done = std::async(std::launch::async, [&] { return collect(*second); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(done.get().tokens.size(), 3u);
  EXPECT_EQ(engine.gauges().running, 0);
}

TEST(Engine, FullQueueAnswers503) {
  model::LlamaModel m = invariant_model();
  Engine engine(m, {256, 1, 2});
  JobSpec s;
  s.prompt = prompt(4, 1);
  s.max_tokens = 200;
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(std::make_shared<Job>(s));
    engine.submit(jobs.back());
  }
  try {
    engine.submit(std::make_shared<Job>(s));
    FAIL() << "a third job was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
  }
  EXPECT_THROW(engine.check_room(), ApiError);
  for (auto& j : jobs) {
    j->cancel();
    collect(*j);
  }
}

TEST(Engine, RefusesTooFewPositionsPerSlot) {
  model::LlamaModel m = invariant_model();
  EXPECT_THROW(Engine(m, {7, 4, 64}), BadInput);
  EXPECT_THROW(Engine(m, {64, 0, 64}), BadInput);
}

}  // namespace
}  // namespace medtune::serve
