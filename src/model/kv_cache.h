// Keys and values of past positions, per layer, for incremental decoding and shared prefixes.
// The keys and values live in the memory of the backend the model computes on; the validity
// mask is kept on the host (it is small and written there) and uploaded by each forward call.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/array.h"
#include "model/config.h"

namespace medtune::model {

struct KvCache {
  int64_t L = 0, B = 0, Smax = 0, NKV = 0, HD = 0;
  int64_t length = 0;               // forward(Batch): positions [0, length) are filled for every row
  backend::Array<float> k, v;       // (L, B, Smax, NKV, HD), zeroed
  std::vector<uint8_t> valid;       // (B, Smax): 1 = a real token, 0 = padding (never attended)
  std::vector<int64_t> lengths;     // (B) forward_ragged: positions [0, lengths[b]) of row b are filled

  KvCache() = default;
  // On `be` (the model's backend: LlamaModel::backend()); the CPU when not given.
  KvCache(const ModelConfig& c, int64_t batch, int64_t max_len, backend::Backend& be = backend::cpu())
      : L(c.num_hidden_layers), B(batch), Smax(max_len), NKV(c.num_key_value_heads),
        HD(c.head_dim), k(be, static_cast<size_t>(L * B * Smax * NKV * HD)), v(be, k.size()),
        valid(static_cast<size_t>(B * Smax), 0), lengths(static_cast<size_t>(B), 0) {
    k.zero();
    v.zero();
  }

  backend::Backend& backend() const { return *k.backend(); }
  float* layer_k(int64_t l) { return k.data() + l * B * Smax * NKV * HD; }
  float* layer_v(int64_t l) { return v.data() + l * B * Smax * NKV * HD; }
  const float* layer_k(int64_t l) const { return k.data() + l * B * Smax * NKV * HD; }
  const float* layer_v(int64_t l) const { return v.data() + l * B * Smax * NKV * HD; }
  int64_t bytes() const { return static_cast<int64_t>(k.bytes() + v.bytes()); }
};

}  // namespace medtune::model
