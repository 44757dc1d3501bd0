// Forward-pass invariants: incremental decoding with the KV cache equals one full pass, a
// padded row in a batch gives the same logits as the row alone, and logits for a few rows equal
// those rows of the full pass.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "support/buffers.h"

namespace medtune {
namespace {

const char* kFixture = MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/llama_gqa/base";

// Incremental and full passes sum in a different order (BLAS blocking differs with T), so they
// agree to fp32 rounding: NMSE <= 1e-10, as for any fp32 reduction of this size (tests/unit/ops).
constexpr double kNmse = 1e-10;

TEST(Forward, KvCacheDecodingEqualsFullPass) {
  model::LlamaModel m(io::open_checkpoint(kFixture));
  const std::vector<int32_t> ids = {3, 17, 5, 42, 9, 1, 30};
  model::Batch full{1, static_cast<int64_t>(ids.size()), ids, {}};
  const auto want = m.logits(full);  // (T, V)

  model::KvCache cache(m.config(), 1, static_cast<int64_t>(ids.size()));
  std::vector<float> got, step;
  model::Batch prefix{1, 3, {ids[0], ids[1], ids[2]}, {}};
  m.forward(prefix, cache, step);
  got = step;
  for (size_t t = 3; t < ids.size(); ++t) {
    model::Batch one{1, 1, {ids[t]}, {}};
    m.forward(one, cache, step);
    got.insert(got.end(), step.begin(), step.end());
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(testing::nmse(got.data(), want.data(), got.size()), kNmse);
  EXPECT_EQ(cache.length, static_cast<int64_t>(ids.size()));
}

TEST(Forward, PaddedRowMatchesUnpaddedRow) {
  model::LlamaModel m(io::open_checkpoint(kFixture));
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> a = {4, 8, 15, 16, 23}, b = {42, 7, 0, 0, 0};
  model::Batch batch{2, 5, {}, {1, 1, 1, 1, 1, 1, 1, 0, 0, 0}};
  batch.ids.insert(batch.ids.end(), a.begin(), a.end());
  batch.ids.insert(batch.ids.end(), b.begin(), b.end());
  const auto both = m.logits(batch);
  const auto alone = m.logits(model::Batch{1, 2, {42, 7}, {}});
  // Row 1, positions 0 and 1: the padding after them must not change anything.
  EXPECT_LE(testing::nmse(both.data() + 5 * V, alone.data(), static_cast<size_t>(2 * V)), kNmse);
}

// logit_rows: only those rows leave the last layer (its o_proj and MLP run on them alone), in
// any order and with repeats, and after a cached prefix (the scorer's options pass) as well.
TEST(Forward, LogitRowsEqualThoseRowsOfTheFullPass) {
  model::LlamaModel m(io::open_checkpoint(kFixture));
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> ids = {3, 17, 5, 42, 9, /* row 1 */ 1, 30, 11, 2, 8};
  const auto want = m.logits(model::Batch{2, 5, ids, {}});  // (10, V)
  const auto expect_rows = [&](const std::vector<float>& got, const std::vector<int64_t>& full_rows) {
    ASSERT_EQ(got.size(), full_rows.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < full_rows.size(); ++i)
      EXPECT_LE(testing::nmse(got.data() + i * V, want.data() + full_rows[i] * V, static_cast<size_t>(V)), kNmse)
          << "row " << full_rows[i];
  };

  model::KvCache cache(m.config(), 2, 5);
  std::vector<float> got;
  const std::vector<int64_t> rows = {7, 2, 9, 2, 0};
  m.forward(model::Batch{2, 5, ids, {}}, cache, got, rows);
  expect_rows(got, rows);

  // Positions 0-2 of both rows, then 3-4 with logits for (row 1, 4) and (row 0, 3) only.
  model::KvCache cached(m.config(), 2, 5);
  std::vector<float> prefix;
  m.forward(model::Batch{2, 3, {3, 17, 5, 1, 30, 11}, {}}, cached, prefix, {2});
  m.forward(model::Batch{2, 2, {42, 9, 2, 8}, {}}, cached, got, {3, 0});  // flat rows of (2, 2)
  expect_rows(got, {9, 3});
}

TEST(Forward, TokenOutsideVocabularyIsBadInput) {
  model::LlamaModel m(io::open_checkpoint(kFixture));
  model::Batch batch{1, 1, {static_cast<int32_t>(m.config().vocab_size)}, {}};
  EXPECT_THROW(m.logits(batch), BadInput);
}

}  // namespace
}  // namespace medtune

namespace medtune {
namespace {

TEST(Forward, SequenceLongerThanSlidingWindowIsRefused) {
  // The mistral fixture declares sliding_window 32: 32 tokens are exact causal attention, 33 are not.
  model::LlamaModel m(io::open_checkpoint(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/mistral/base"));
  ASSERT_EQ(m.config().sliding_window, 32);
  EXPECT_NO_THROW(m.logits(model::Batch{1, 32, std::vector<int32_t>(32, 5), {}}));
  EXPECT_THROW(m.logits(model::Batch{1, 33, std::vector<int32_t>(33, 5), {}}), BadInput);
}

}  // namespace
}  // namespace medtune
