// LlamaModel::forward_ragged (the server's continuous batching): sequences at different positions,
// in different KV cache slots and with different adapters, batched into one forward call, get bit
// for bit the logits each gets alone, on the batch-invariant CPU backend; and a sequence alone
// gets what forward(Batch) gives it.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "support/buffers.h"
#include "support/random_adapter.h"

namespace medtune {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

// One sequence of a test: its tokens, fed in runs of run_lengths tokens, and its adapter.
struct Seq {
  std::vector<int32_t> ids;
  std::vector<int64_t> runs;
  model::LoraWeights* lora;
};

// Logits of every run's last token, the sequence alone in a one-slot cache.
std::vector<std::vector<float>> alone(model::LlamaModel& m, const Seq& s) {
  model::KvCache cache = m.make_cache(1, 32);
  std::vector<std::vector<float>> out;
  int64_t pos = 0;
  for (const int64_t T : s.runs) {
    model::RaggedBatch b;
    for (int64_t t = 0; t < T; ++t) {
      b.ids.push_back(s.ids[static_cast<size_t>(pos + t)]);
      b.slots.push_back(0);
      b.positions.push_back(pos + t);
    }
    b.adapters.push_back({0, T, s.lora});
    b.logit_rows = {T - 1};
    out.emplace_back();
    m.forward_ragged(b, cache, out.back());
    pos += T;
  }
  return out;
}

TEST(ForwardRagged, BatchedSequencesGetTheirLogitsAloneBitForBit) {
  model::LlamaModel m(io::open_checkpoint(kFixture), model::WeightQuant::kNone,
                      backend::batch_invariant(backend::cpu()));
  const int64_t V = m.config().vocab_size;
  model::LoraWeights ad1 = testing::random_adapter(m.config(), 1), ad2 = testing::random_adapter(m.config(), 2);
  // Prompts of 5, 3 and 7 tokens, then one-token steps; the third sequence runs its prompt in
  // two runs (chunked prefill) and has one step less.
  const std::vector<Seq> seqs = {{{3, 17, 5, 42, 9, 1, 30}, {5, 1, 1}, nullptr},
                                 {{4, 8, 15, 16, 23}, {3, 1, 1}, &ad1},
                                 {{7, 7, 2, 9, 11, 12, 13, 14, 5}, {4, 3, 1}, &ad2}};
  std::vector<std::vector<std::vector<float>>> want;
  for (const Seq& s : seqs) want.push_back(alone(m, s));

  // Slots 2, 0, 1 for the three sequences; each step's rows grouped by adapter as the engine
  // does, and in another order at each step.
  const std::vector<int64_t> slot = {2, 0, 1};
  const std::vector<std::vector<size_t>> order = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}};
  model::KvCache cache = m.make_cache(3, 32);
  std::vector<int64_t> pos(3, 0);
  for (size_t step = 0; step < 3; ++step) {
    model::RaggedBatch b;
    std::vector<size_t> which;
    for (const size_t i : order[step]) {
      const Seq& s = seqs[i];
      const int64_t T = s.runs[step], row0 = static_cast<int64_t>(b.ids.size());
      for (int64_t t = 0; t < T; ++t) {
        b.ids.push_back(s.ids[static_cast<size_t>(pos[i] + t)]);
        b.slots.push_back(slot[i]);
        b.positions.push_back(pos[i] + t);
      }
      b.adapters.push_back({row0, T, s.lora});
      b.logit_rows.push_back(row0 + T - 1);
      which.push_back(i);
      pos[i] += T;
    }
    std::vector<float> logits;
    m.forward_ragged(b, cache, logits);
    ASSERT_EQ(logits.size(), which.size() * static_cast<size_t>(V));
    for (size_t r = 0; r < which.size(); ++r)
      EXPECT_EQ(0, std::memcmp(logits.data() + r * static_cast<size_t>(V), want[which[r]][step].data(),
                               static_cast<size_t>(V) * sizeof(float)))
          << "sequence " << which[r] << ", step " << step;
  }
  EXPECT_EQ(cache.lengths, (std::vector<int64_t>{5, 8, 7}));  // slots 0, 1, 2: sequences 1, 2, 0
}

TEST(ForwardRagged, AloneEqualsForwardBatch) {
  // The same backend: the same ops in the same order, bit for bit (one LoRA GEMM pair per
  // projection either way, each element a fixed-order dot). The plain CPU backend (OpenBLAS,
  // whose rows depend on the number of rows) agrees to fp32 rounding as test_forward.cpp's.
  for (const bool invariant : {true, false}) {
    backend::Backend& be = invariant ? backend::batch_invariant(backend::cpu()) : backend::cpu();
    model::LlamaModel m(io::open_checkpoint(kFixture), model::WeightQuant::kNone, be);
    model::LoraWeights ad = testing::random_adapter(m.config(), 3);
    const int64_t V = m.config().vocab_size;
    const std::vector<int32_t> ids = {3, 17, 5, 42, 9, 1, 30};
    const auto T = static_cast<int64_t>(ids.size());
    for (model::LoraWeights* lora : {static_cast<model::LoraWeights*>(nullptr), &ad}) {
      m.set_lora(lora);
      const std::vector<float> want = m.logits(model::Batch{1, T, ids, {}});  // (T, V)
      m.set_lora(nullptr);
      model::KvCache cache = m.make_cache(2, T);
      model::RaggedBatch b;
      for (int64_t t = 0; t < T; ++t) {
        b.ids.push_back(ids[static_cast<size_t>(t)]);
        b.slots.push_back(1);
        b.positions.push_back(t);
        b.logit_rows.push_back(t);
      }
      b.adapters.push_back({0, T, lora});
      std::vector<float> got;
      m.forward_ragged(b, cache, got);
      ASSERT_EQ(got.size(), static_cast<size_t>(T * V));
      if (invariant) EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << (lora != nullptr);
      else EXPECT_LE(testing::nmse(got.data(), want.data(), got.size()), 1e-10) << (lora != nullptr);
    }
  }
}

TEST(ForwardRagged, RefusesRunsThatBreakTheContract) {
  model::LlamaModel m(io::open_checkpoint(kFixture));
  model::KvCache cache = m.make_cache(2, 8);
  std::vector<float> logits;
  model::RaggedBatch gap{{1, 2}, {0, 0}, {0, 2}, {}, {1}};  // positions not consecutive
  EXPECT_THROW(m.forward_ragged(gap, cache, logits), Internal);
  model::RaggedBatch ahead{{1}, {1}, {3}, {}, {0}};  // starts past the slot's filled length (0)
  EXPECT_THROW(m.forward_ragged(ahead, cache, logits), Internal);
  model::RaggedBatch twice{{1, 2, 3}, {0, 1, 0}, {0, 0, 1}, {}, {2}};  // slot 0 in two runs
  EXPECT_THROW(m.forward_ragged(twice, cache, logits), Internal);
  model::RaggedBatch bad_slot{{1}, {2}, {0}, {}, {0}};
  EXPECT_THROW(m.forward_ragged(bad_slot, cache, logits), Internal);
}

}  // namespace
}  // namespace medtune
