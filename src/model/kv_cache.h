// Keys and values of past positions, per layer, for incremental decoding and shared prefixes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace medtune::model {

struct KvCache {
  int64_t L = 0, B = 0, Smax = 0, NKV = 0, HD = 0;
  int64_t length = 0;           // positions [0, length) are filled for every row
  std::vector<float> k, v;      // (L, B, Smax, NKV, HD)
  std::vector<uint8_t> valid;   // (B, Smax): 1 = a real token, 0 = padding (never attended)

  KvCache() = default;
  KvCache(const ModelConfig& c, int64_t batch, int64_t max_len)
      : L(c.num_hidden_layers), B(batch), Smax(max_len), NKV(c.num_key_value_heads),
        HD(c.head_dim), k(static_cast<size_t>(L * B * Smax * NKV * HD)), v(k.size()),
        valid(static_cast<size_t>(B * Smax), 0) {}

  float* layer_k(int64_t l) { return k.data() + l * B * Smax * NKV * HD; }
  float* layer_v(int64_t l) { return v.data() + l * B * Smax * NKV * HD; }
  int64_t bytes() const { return static_cast<int64_t>((k.size() + v.size()) * sizeof(float)); }
};

}  // namespace medtune::model
