#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/nf4.h"
#include "core/quant.h"
#include "ops/linear.h"

namespace medtune::model {

namespace {

const RawTensor& find(const io::Checkpoint& ckpt, const std::string& name) {
  auto it = ckpt.tensors.find(name);
  if (it == ckpt.tensors.end()) throw BadInput(ckpt.path + ": missing tensor '" + name + "'");
  return it->second;
}

bool is_matrix_dtype(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q4_K: case DType::Q6_K: case DType::Q5_0: case DType::Q5_1:
    case DType::Q5_K: case DType::Q2_K: case DType::Q3_K: case DType::IQ4_NL: case DType::IQ4_XS:
    case DType::NF4: return true;
    default: return false;
  }
}

ops::StoredMatrix matrix(const io::Checkpoint& ckpt, const std::string& name) {
  const RawTensor& t = find(ckpt, name);
  if (t.shape.size() != 2) throw BadInput(ckpt.path + ": tensor '" + name + "' is not a matrix");
  if (!is_matrix_dtype(t.dtype))
    throw BadInput(ckpt.path + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                   ", which medtune cannot use as a weight (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS)");
  if (t.shape[1] % dtype_block_elems(t.dtype) != 0)
    throw BadInput(ckpt.path + ": tensor '" + name + "' rows are not whole quantization blocks");
  return ops::StoredMatrix{t.dtype, t.shape[0], t.shape[1], t.data};
}

std::vector<float> vector_f32(const io::Checkpoint& ckpt, const std::string& name) {
  const RawTensor& t = find(ckpt, name);
  if (t.shape.size() != 1) throw BadInput(ckpt.path + ": tensor '" + name + "' is not a vector");
  if (!is_matrix_dtype(t.dtype))
    throw BadInput(ckpt.path + ": tensor '" + name + "' has unsupported dtype " +
                   std::string(dtype_name(t.dtype)));
  std::vector<float> out(static_cast<size_t>(t.shape[0]));
  dequantize_row(t.dtype, t.data, out.data(), t.shape[0]);
  return out;
}

// Drops the mapped pages of a tensor that was quantized at load: they are never read again, and
// without this they would stay resident (counted in RSS) until memory pressure evicts them.
// Only whole pages strictly inside the tensor are dropped (neighbours may share the edges);
// the mapping itself stays valid (MAP_PRIVATE, read-only), a later read would fault back in.
void release_pages(const RawTensor& t) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + static_cast<uintptr_t>(t.nbytes)) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

ops::StoredMatrix linear_weight(const io::Checkpoint& ckpt, const std::string& name, WeightQuant quant,
                                ModelWeights& w) {
  if (quant == WeightQuant::kNone) return matrix(ckpt, name);
  const RawTensor& t = find(ckpt, name);
  if (t.shape.size() != 2) throw BadInput(ckpt.path + ": tensor '" + name + "' is not a matrix");
  auto blocks = quantize_nf4_rows(t.dtype, t.data, t.shape[0], t.shape[1], ckpt.path + ": tensor '" + name + "'");
  release_pages(t);
  w.owned.push_back(blocks);
  return ops::StoredMatrix{DType::NF4, t.shape[0], t.shape[1], blocks->data()};
}

}  // namespace

namespace {
bool is_block_linear(const std::string& name) {
  static const char* const kSuffixes[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                          "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* s : kSuffixes) {
    const std::string suf(s);
    if (name.size() >= suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0) return true;
  }
  return false;
}
int64_t nf4_bytes(int64_t numel) { return numel / nf4::kBlock * nf4::kRowBlockBytes; }
}  // namespace

WeightBytes planned_weight_bytes(const io::Checkpoint& ckpt, WeightQuant quant) {
  WeightBytes b;
  for (const auto& [name, t] : ckpt.tensors) {
    if (quant == WeightQuant::kNf4 && is_block_linear(name)) b.quantized += nf4_bytes(t.numel());
    else b.mapped += t.nbytes;
  }
  return b;
}

WeightBytes planned_weight_bytes(const ModelConfig& c, DType stored, WeightQuant quant) {
  WeightBytes b;
  for (const auto& [name, shape] : io::expected_tensor_shapes(c)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (quant == WeightQuant::kNf4 && is_block_linear(name)) b.quantized += nf4_bytes(n);
    else b.mapped += dtype_row_bytes(stored, n);
  }
  return b;
}

bool block_linears_take_int8(const io::Checkpoint& ckpt, WeightQuant quant) {
  if (quant == WeightQuant::kNf4) return true;  // every block linear bound as DType::NF4
  bool any = false;
  for (const auto& [name, t] : ckpt.tensors) {
    if (!is_block_linear(name)) continue;
    if (!ops::int8_path(t.dtype)) return false;
    any = true;
  }
  return any;
}

WeightQuant parse_weight_quant(const std::string& s, const std::string& what) {
  if (s == "none") return WeightQuant::kNone;
  if (s == "nf4") return WeightQuant::kNf4;
  throw BadInput(what + ": unknown base quantization '" + s + "' (supported: none, nf4)");
}

std::shared_ptr<const std::vector<uint8_t>> quantize_nf4_rows(DType dtype, const uint8_t* data,
                                                              int64_t rows, int64_t cols,
                                                              const std::string& name) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw BadInput(name + " has dtype " + std::string(dtype_name(dtype)) +
                   "; quantizing the base to nf4 needs F32, F16 or BF16 weights (a GGUF-quantized "
                   "base trains as it is stored: leave the base quantization at none)");
  if (cols % nf4::kBlock != 0)
    throw BadInput(name + " has " + std::to_string(cols) +
                   " columns; nf4 rows must be whole blocks of 64");
  // bitsandbytes quantizes the flattened tensor in blocks of 64; with cols % 64 == 0 every block
  // lies in one row, so rows can be quantized independently (in parallel) in chunks.
  const int64_t nblocks = rows * cols / nf4::kBlock;
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2));
  std::vector<float> absmax(static_cast<size_t>(nblocks));
  constexpr int64_t kChunkRows = 16;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
#pragma omp parallel
  {
    std::vector<float> f32(static_cast<size_t>(kChunkRows * cols));  // (kChunkRows, cols)
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t r0 = ch * kChunkRows, r1 = std::min(rows, r0 + kChunkRows);
      const int64_t n = (r1 - r0) * cols;
      // widening F16/BF16 to fp32 is exact, as bnb's A.float() is
      dequantize_row(dtype, data + dtype_row_bytes(dtype, r0 * cols), f32.data(), n);
      nf4::quantize(f32.data(), n, packed.data() + r0 * cols / 2, absmax.data() + r0 * cols / nf4::kBlock);
    }
  }
  // double quantization (QLoRA's bnb_4bit_use_double_quant), resolved back to the fp32 absmax
  // bitsandbytes' dequantize_4bit uses
  const nf4::NestedAbsmax nested = nf4::quantize_absmax(absmax.data(), nblocks);
  nf4::dequantize_absmax(nested, absmax.data());
  return std::make_shared<const std::vector<uint8_t>>(nf4::row_blocks(packed.data(), absmax.data(), rows, cols));
}

ModelWeights bind_weights(const io::Checkpoint& ckpt, WeightQuant quant) {
  const ModelConfig& c = ckpt.config;
  ModelWeights w;
  w.embed = matrix(ckpt, "model.embed_tokens.weight");
  w.lm_head = ckpt.tensors.count("lm_head.weight") ? matrix(ckpt, "lm_head.weight") : w.embed;
  w.final_norm = vector_f32(ckpt, "model.norm.weight");
  w.qk_rows_permuted = ckpt.qk_rows_permuted;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.input_norm = vector_f32(ckpt, p + "input_layernorm.weight");
    lw.post_attn_norm = vector_f32(ckpt, p + "post_attention_layernorm.weight");
    lw.q = linear_weight(ckpt, p + "self_attn.q_proj.weight", quant, w);
    lw.k = linear_weight(ckpt, p + "self_attn.k_proj.weight", quant, w);
    lw.v = linear_weight(ckpt, p + "self_attn.v_proj.weight", quant, w);
    lw.o = linear_weight(ckpt, p + "self_attn.o_proj.weight", quant, w);
    if (c.attention_bias) {
      lw.q_bias = vector_f32(ckpt, p + "self_attn.q_proj.bias");
      lw.k_bias = vector_f32(ckpt, p + "self_attn.k_proj.bias");
      lw.v_bias = vector_f32(ckpt, p + "self_attn.v_proj.bias");
    }
    // transformers' LlamaAttention gives o_proj a bias too when attention_bias is set; Qwen2's
    // has none. open_checkpoint already checked which the architecture requires.
    if (ckpt.tensors.count(p + "self_attn.o_proj.bias") != 0)
      lw.o_bias = vector_f32(ckpt, p + "self_attn.o_proj.bias");
    lw.gate = linear_weight(ckpt, p + "mlp.gate_proj.weight", quant, w);
    lw.up = linear_weight(ckpt, p + "mlp.up_proj.weight", quant, w);
    lw.down = linear_weight(ckpt, p + "mlp.down_proj.weight", quant, w);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

int64_t bf16_copy_elements(const io::Checkpoint& ckpt, WeightQuant quant) {
  // bind_weights' choice of the lm_head.
  const std::string head =
      ckpt.tensors.count("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
  int64_t n = 0;
  for (const auto& [name, t] : ckpt.tensors) {
    const bool linear = is_block_linear(name);
    if (!linear && name != head) continue;
    const bool bound_bf16 = t.dtype == DType::BF16 && !(linear && quant == WeightQuant::kNf4);
    if (!bound_bf16) n += t.numel();
  }
  return n;
}

int64_t keep_bf16_copies(ModelWeights& w) {
  int64_t bytes = 0;
  const auto keep = [&](ops::StoredMatrix& m) {
    if (m.dtype == DType::BF16 || m.bf16 != nullptr) return;
    auto owned = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(m.rows * m.cols) * 2);
    auto* rows = reinterpret_cast<uint16_t*>(owned->data());
    ops::round_rows_to_bf16(m, rows);
    m.bf16 = rows;
    bytes += static_cast<int64_t>(owned->size());
    w.owned.push_back(std::move(owned));
  };
  for (LayerWeights& l : w.layers)
    for (ops::StoredMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) keep(*m);
  keep(w.lm_head);
  return bytes;
}

}  // namespace medtune::model
