// llama3 rope scaling as llama.cpp stores it (rope_freqs.weight, model/rope.h): the divisors
// computed from a config give the frequencies transformers computes, and a GGUF's divisors give
// back the config's parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "io/checkpoint.h"
#include "model/rope.h"

namespace medtune::model {
namespace {

ModelConfig llama31_like() {
  ModelConfig c;
  c.architecture = "llama";
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192};
  return c;
}

// Both paths are a handful of fp32 operations on the same unscaled frequency and the same
// `smooth`: transformers' (1-s)*f/factor + s*f takes 5 roundings, base/(1/((1-s)/factor + s))
// takes 5, so they differ by at most about 10 units of 2^-24 relative; 16 is the bound used.
TEST(RopeFreqFactors, DivisorsGiveTransformersFrequencies) {
  const ModelConfig fixture = io::open_checkpoint(std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/hf/llama3_rope/base").config;
  for (const ModelConfig& c : {llama31_like(), fixture}) {
    ASSERT_EQ(c.rope_scaling.type, "llama3");
    const std::vector<float> hf = rope_inv_freq(c);
    ModelConfig g = c;
    g.rope_scaling = RopeScaling{};
    g.rope_freq_factors = llama3_rope_freq_factors(c);
    const std::vector<float> ours = rope_inv_freq(g);
    ASSERT_EQ(ours.size(), hf.size());
    int scaled = 0;
    for (size_t i = 0; i < hf.size(); ++i) {
      EXPECT_LE(std::fabs(static_cast<double>(ours[i]) - static_cast<double>(hf[i])), 16 * std::ldexp(static_cast<double>(hf[i]), -24)) << i;
      scaled += g.rope_freq_factors[i] != 1.0f;
    }
    EXPECT_GT(scaled, 0) << "the config must scale some frequencies, or this test checks nothing";
  }
}

TEST(RopeFreqFactors, Llama3ParametersAreRecoveredFromTheDivisors) {
  ModelConfig c = llama31_like();
  c.rope_freq_factors = llama3_rope_freq_factors(c);
  const auto back = llama3_scaling_from_factors(c);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->type, "llama3");
  EXPECT_EQ(back->factor, 8.0);
  EXPECT_EQ(back->original_max_position_embeddings, 8192);
  c.rope_freq_factors[20] *= 1.001f;  // not what any llama3 parameters give
  EXPECT_FALSE(llama3_scaling_from_factors(c).has_value());
}

}  // namespace
}  // namespace medtune::model
