// Keys and values of past positions, per layer, for incremental decoding and shared prefixes.
// The keys and values live in the memory of the backend the model computes on; the validity
// mask is kept on the host (it is small and written there) and uploaded by each forward call.
// Their element type is the backend's kv_type(): fp32, or IEEE half on the CPU's int8 route
// (backend.h says why).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/array.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"

namespace medtune::model {

// Keys or values in a KvCache from some element on: `data` points at elements of `type` (F32 or
// F16). Offsets are in elements, whatever their size.
struct KvSlice {
  void* data = nullptr;
  DType type = DType::F32;

  KvSlice at(int64_t elems) const {
    return {static_cast<char*>(data) + dtype_row_bytes(type, elems), type};
  }
  float* f32() const {
    if (type != DType::F32) throw Internal("KvSlice::f32 on a " + std::string(dtype_name(type)) + " cache");
    return static_cast<float*>(data);
  }
  uint16_t* f16() const {
    if (type != DType::F16) throw Internal("KvSlice::f16 on a " + std::string(dtype_name(type)) + " cache");
    return static_cast<uint16_t*>(data);
  }
};

struct KvCache {
  int64_t L = 0, B = 0, Smax = 0, NKV = 0, HD = 0;
  int64_t length = 0;               // forward(Batch): positions [0, length) are filled for every row
  DType type = DType::F32;          // of k and v: F32 or F16
  backend::Array<uint8_t> k, v;     // (L, B, Smax, NKV, HD) elements of `type`, zeroed
  std::vector<uint8_t> valid;       // (B, Smax): 1 = a real token, 0 = padding (never attended)
  std::vector<int64_t> lengths;     // (B) forward_ragged: positions [0, lengths[b]) of row b are filled

  KvCache() = default;
  // On `be` (the model's backend: LlamaModel::backend()); the CPU when not given. LlamaModel's
  // make_cache gives the backend's kv_type(). layers: how many layers it holds, 0 for all of c's
  // (a pass that is done with a layer's keys and values before the next layer's reuses one:
  // training with checkpointing, a forward without backward).
  KvCache(const ModelConfig& c, int64_t batch, int64_t max_len, backend::Backend& be = backend::cpu(),
          DType elem = DType::F32, int64_t layers = 0)
      : L(layers > 0 ? layers : c.num_hidden_layers), B(batch), Smax(max_len),
        NKV(c.num_key_value_heads), HD(c.head_dim),
        type(elem), valid(static_cast<size_t>(B * Smax), 0), lengths(static_cast<size_t>(B), 0) {
    if (type != DType::F32 && type != DType::F16)
      throw Internal("KvCache: keys and values are F32 or F16, not " + std::string(dtype_name(type)));
    k.fit(be, static_cast<size_t>(layer_elems() * L) * elem_bytes());
    v.fit(be, k.size());
    k.zero();
    v.zero();
  }

  backend::Backend& backend() const { return *k.backend(); }
  int64_t elem_bytes() const { return dtype_block_bytes(type); }
  int64_t layer_elems() const { return B * Smax * NKV * HD; }
  // Layer l's keys / values. A slice is a view, like the raw pointers it replaced: it does not
  // carry the cache's constness (a const cache's slices are read, as the scorer's prefix is).
  KvSlice layer_k(int64_t l) const { return slice(k, l); }
  KvSlice layer_v(int64_t l) const { return slice(v, l); }
  int64_t bytes() const { return static_cast<int64_t>(k.bytes() + v.bytes()); }

 private:
  KvSlice slice(const backend::Array<uint8_t>& a, int64_t l) const {
    return KvSlice{const_cast<uint8_t*>(a.data()), type}.at(l * layer_elems());
  }
};

// Appends to a cache: rows r < rows of dst (dst_stride elements apart) = src rows (src_stride
// floats apart), cols elements each, in dst's type (backend copy_rows or store_rows_f16).
inline void store_kv(backend::Backend& be, KvSlice dst, int64_t dst_stride, const float* src,
                     int64_t src_stride, int64_t rows, int64_t cols) {
  if (dst.type == DType::F16) be.store_rows_f16(dst.f16(), dst_stride, src, src_stride, rows, cols);
  else be.copy_rows(dst.f32(), dst_stride, src, src_stride, rows, cols);
}

// Backend::attention_forward over a cache of either type.
inline void attention_over_cache(backend::Backend& be, float* out, float* lse, const float* q,
                                 KvSlice k, KvSlice v, const uint8_t* key_valid,
                                 const int64_t* seg_start, const ops::AttentionShape& s) {
  if (k.type == DType::F16)
    be.attention_forward_f16(out, lse, q, k.f16(), v.f16(), key_valid, seg_start, s);
  else be.attention_forward(out, lse, q, k.f32(), v.f32(), key_valid, seg_start, s);
}

}  // namespace medtune::model
