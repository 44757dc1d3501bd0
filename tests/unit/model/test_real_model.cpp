// The bundled real model (SmolLM2-135M-Instruct, GGUF Q4_1) against transformers loading the same
// GGUF (dequantized, float64): tests/fixtures/hf/smollm2_gguf_reference.* from
// tools/make_gguf_reference.py. Runs when MEDTUNE_SMOLLM2_GGUF names the file (scripts/test.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/tensor_convert.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/generate.h"
#include "model/llama.h"

namespace medtune {
namespace {

std::string model_path() {
  const char* p = std::getenv("MEDTUNE_SMOLLM2_GGUF");
  return p != nullptr && std::filesystem::exists(p) ? p : "";
}

TEST(RealModelSlow, SmolLM2GgufLogitsMatchTransformers) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set (scripts/fetch_model.sh fetches the model)";
  const auto ref = io::read_safetensors(MEDTUNE_SOURCE_DIR "/tests/fixtures/hf/smollm2_gguf_reference.safetensors");
  const auto ids = tensor_to_i64(ref.tensors.at("input_ids"));
  const auto last = tensor_to_f32(ref.tensors.at("last_logits"));  // (4, V)
  const auto argmax = tensor_to_i64(ref.tensors.at("argmax"));      // (T)
  const auto greedy = tensor_to_i64(ref.tensors.at("greedy_out"));  // (T + 8)

  model::LlamaModel m(io::open_checkpoint(path));
  const int64_t V = m.config().vocab_size, T = static_cast<int64_t>(ids.size());
  model::Batch batch{1, T, std::vector<int32_t>(ids.begin(), ids.end()), {}};
  const auto logits = m.logits(batch);  // (T, V)

  // fp32 against a float64 reference of the same dequantized weights: the project's fp32 bound,
  // max |dlogit| / max |logit| <= 1e-4, over the last 4 positions' full distributions.
  double num = 0, den = 0;
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t v = 0; v < V; ++v) {
      const double want = last[static_cast<size_t>(r * V + v)];
      const double got = logits[static_cast<size_t>((T - 4 + r) * V + v)];
      num = std::max(num, std::fabs(got - want));
      den = std::max(den, std::fabs(want));
    }
  EXPECT_LE(num / den, 1e-4) << "max abs error " << num << ", max |logit| " << den;

  // The most likely next token at every position.
  int64_t disagree = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * V;
    disagree += std::max_element(row, row + V) - row != argmax[static_cast<size_t>(t)];
  }
  EXPECT_EQ(disagree, 0);

  // Greedy continuation, 8 tokens.
  model::GenerateOptions opt;
  opt.max_new_tokens = static_cast<int64_t>(greedy.size()) - T;
  const auto out = model::generate(m, batch.ids, opt);
  std::vector<int64_t> full(ids.begin(), ids.end());
  full.insert(full.end(), out.begin(), out.end());
  EXPECT_EQ(full, greedy);
}

}  // namespace
}  // namespace medtune
