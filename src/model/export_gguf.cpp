#include "model/export_gguf.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/quant_write.h"
#include "model/merge.h"
#include "model/rope.h"

namespace medtune::model {

namespace {

// llama_ftype values (llama.h) written as general.file_type.
constexpr uint32_t kFileTypeF32 = 0;
constexpr uint32_t kFileTypeF16 = 1;
constexpr uint32_t kFileTypeQ8_0 = 7;

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

int64_t qk_heads(const ModelConfig& c, const std::string& hf_name) {
  if (ends_with(hf_name, "self_attn.q_proj.weight") || ends_with(hf_name, "self_attn.q_proj.bias"))
    return c.num_attention_heads;
  if (ends_with(hf_name, "self_attn.k_proj.weight") || ends_with(hf_name, "self_attn.k_proj.bias"))
    return c.num_key_value_heads;
  return 0;
}

// Hyper-parameter keys as convert_hf_to_gguf.py writes them for a Hugging Face source.
io::GgufMetadata metadata_from_config(const ModelConfig& c, uint32_t file_type,
                                      const io::GgufMetadata* tokenizer) {
  const std::string a = gguf_architecture(c);
  const auto u32 = [](int64_t v) { return io::gguf_u32(static_cast<uint32_t>(v)); };
  io::GgufMetadata md = {
      {"general.architecture", io::gguf_string(a)},
      {"general.type", io::gguf_string("model")},
      {"general.name", io::gguf_string("medtune export")},
      {a + ".block_count", u32(c.num_hidden_layers)},
      {a + ".context_length", u32(c.max_position_embeddings)},
      {a + ".embedding_length", u32(c.hidden_size)},
      {a + ".feed_forward_length", u32(c.intermediate_size)},
      {a + ".attention.head_count", u32(c.num_attention_heads)},
      {a + ".attention.head_count_kv", u32(c.num_key_value_heads)},
      {a + ".rope.freq_base", io::gguf_f32(static_cast<float>(c.rope_theta))},
      {a + ".attention.layer_norm_rms_epsilon", io::gguf_f32(static_cast<float>(c.rms_norm_eps))},
      {a + ".attention.key_length", u32(c.head_dim)},
      {a + ".attention.value_length", u32(c.head_dim)},
      {"general.file_type", io::gguf_u32(file_type)},
      {a + ".vocab_size", u32(c.vocab_size)},
      {a + ".rope.dimension_count", u32(c.head_dim)},
  };
  if (tokenizer != nullptr) {
    md.insert(md.end(), tokenizer->begin(), tokenizer->end());
  } else {
    // No tokenizer: llama.cpp's LLAMA_VOCAB_TYPE_NONE, which evaluates token ids as given.
    md.push_back({"tokenizer.ggml.model", io::gguf_string("none")});
    if (c.bos_token_id >= 0) md.push_back({"tokenizer.ggml.bos_token_id", u32(c.bos_token_id)});
    if (!c.eos_token_ids.empty()) md.push_back({"tokenizer.ggml.eos_token_id", u32(c.eos_token_ids[0])});
  }
  md.push_back({"general.quantization_version", io::gguf_u32(2)});
  return md;
}

// The source GGUF's keys, in its order, with file type and alignment made to match what we write.
io::GgufMetadata metadata_from_gguf(const io::GgufFile& g, uint32_t file_type) {
  io::GgufMetadata md;
  // The reader keeps keys in a map; restore the file's usual order: general.architecture first
  // (llama.cpp does not need it first, but gguf-py's writer always puts it there).
  md.push_back({"general.architecture", g.metadata().at("general.architecture")});
  for (const auto& [k, v] : g.metadata()) {
    if (k == "general.architecture" || k == "general.alignment") continue;
    if (k == "general.file_type") {
      md.push_back({k, io::gguf_u32(file_type)});
      continue;
    }
    md.push_back({k, v});
  }
  bool has_ft = false;
  for (const auto& kv : md) has_ft = has_ft || kv.first == "general.file_type";
  if (!has_ft) md.push_back({"general.file_type", io::gguf_u32(file_type)});
  return md;
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::string kPrefix = "model.layers.";
  if (hf.rfind(kPrefix, 0) == 0) {
    const size_t dot = hf.find('.', kPrefix.size());
    const std::string layer = hf.substr(kPrefix.size(), dot - kPrefix.size());
    const std::string rest = hf.substr(dot + 1);
    static const std::pair<const char*, const char*> kMap[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.bias", "attn_output.bias"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    for (const auto& [from, to] : kMap)
      if (rest == from) return "blk." + layer + "." + to;
  }
  throw Internal("gguf_tensor_name: no llama.cpp name for '" + hf + "'");
}

std::string gguf_architecture(const ModelConfig& c) {
  return c.architecture == "qwen2" ? "qwen2" : "llama";
}

bool gguf_permutes_qk(const ModelConfig& c) { return c.architecture != "qwen2"; }

GgufExportReport export_merged_gguf(const io::Checkpoint& ckpt, const LoraWeights* lora,
                                    const std::string& out_path, DType type,
                                    const io::GgufMetadata* tokenizer) {
  if (type != DType::F32 && type != DType::F16 && type != DType::Q8_0) {
    throw Internal("export_merged_gguf: type must be F32, F16 or Q8_0");
  }
  const ModelConfig& c = ckpt.config;
  GgufExportReport rep;
  const uint32_t file_type = type == DType::F32 ? kFileTypeF32 : type == DType::F16 ? kFileTypeF16 : kFileTypeQ8_0;
  const io::GgufMetadata md = ckpt.format == "gguf" ? metadata_from_gguf(*ckpt.gguf, file_type)
                                                    : metadata_from_config(c, file_type, tokenizer);

  std::vector<std::vector<uint8_t>> bytes;
  std::vector<io::GgufTensorToWrite> tensors;
  const std::vector<std::string> names = merged_tensor_names(ckpt);
  bytes.reserve(names.size() + 1);
  // llama3 rope scaling travels as rope_freqs.weight (F32, no HF name), first, as the converter
  // writes it: copied from a GGUF source, computed from config.json's rope_scaling otherwise.
  if (auto it = ckpt.tensors.find("rope_freqs.weight"); it != ckpt.tensors.end()) {
    const RawTensor& t = it->second;
    bytes.emplace_back(t.data, t.data + t.nbytes);
    tensors.push_back({"rope_freqs.weight", t.dtype, t.shape, bytes.back().data()});
  } else if (c.rope_scaling.type == "llama3") {
    const std::vector<float> factors = llama3_rope_freq_factors(c);  // (HD/2)
    bytes.emplace_back(factors.size() * sizeof(float));
    std::memcpy(bytes.back().data(), factors.data(), bytes.back().size());
    tensors.push_back({"rope_freqs.weight", DType::F32, {static_cast<int64_t>(factors.size())}, bytes.back().data()});
  }
  for (const std::string& name : names) {
    MergedTensor m = merge_tensor(ckpt, lora, name);
    const int64_t heads = qk_heads(c, name);
    const int64_t cols = m.shape.back();
    const int64_t rows = static_cast<int64_t>(m.values.size()) / cols;
    if (heads > 0 && gguf_permutes_qk(c)) {
      m.values = permute_rows_hf_to_gguf(m.values, heads, c.head_dim, m.shape.size() == 1 ? 1 : cols);
    }
    std::vector<float> f(m.values.size());
    DType dt = DType::F32;
    if (m.shape.size() >= 2) {
      dt = type;
      if (dt == DType::Q8_0 && cols % 32 != 0) {
        dt = DType::F16;
        rep.notes.push_back(name + ": rows of " + std::to_string(cols) +
                            " are not whole Q8_0 blocks: written as F16");
      }
    }
    require_representable(m, dt);
    if (dt == DType::F16) {
      // Rounded once from fp64 (merge.h); the other types go through the fp32 merged value,
      // which is what convert_hf_to_gguf quantizes from.
      bytes.emplace_back(m.values.size() * 2);
      for (size_t k = 0; k < m.values.size(); ++k) {
        const uint16_t h = round_once_f16(m.values[k]);
        std::memcpy(bytes.back().data() + 2 * k, &h, 2);
      }
    } else {
      for (size_t k = 0; k < m.values.size(); ++k) f[k] = round_once_f32(m.values[k]);
      bytes.push_back(encode_f32(dt, f.data(), rows, cols));
    }
    tensors.push_back({gguf_tensor_name(name), dt, m.shape, bytes.back().data()});
  }
  io::write_gguf(out_path, md, tensors);
  return rep;
}

GgufExportReport export_lora_gguf(const io::Checkpoint& base, const LoraWeights& lora,
                                  const std::string& out_path) {
  const ModelConfig& c = base.config;
  GgufExportReport rep;
  int64_t rank = 0;
  std::vector<std::vector<float>> store;
  std::vector<io::GgufTensorToWrite> tensors;
  for (int64_t l = 0; l < static_cast<int64_t>(lora.layers.size()); ++l) {
    for (int p = 0; p < kNumProj; ++p) {
      const LoraLinear& ll = lora.at(l, static_cast<Proj>(p));
      if (!ll.enabled()) continue;
      if (rank != 0 && ll.r != rank) {
        throw BadInput("adapter: modules of rank " + std::to_string(rank) + " and " +
                       std::to_string(ll.r) + ": llama.cpp's LoRA GGUF has one alpha for all "
                       "modules and scales by alpha / rank, so mixed ranks cannot be expressed");
      }
      rank = ll.r;
      const std::string module = proj_module_path(l, static_cast<Proj>(p));
      const std::string g = gguf_tensor_name(module + ".weight");
      store.emplace_back(ll.A);
      tensors.push_back({g + ".lora_a", DType::F32, {ll.r, ll.in}, nullptr});
      // B's rows are the projection's output rows: permuted like the base's q/k rows.
      const Proj pr = static_cast<Proj>(p);
      std::vector<float> B = ll.B;
      if (gguf_permutes_qk(c) && (pr == Proj::q || pr == Proj::k)) {
        const int64_t heads = pr == Proj::q ? c.num_attention_heads : c.num_key_value_heads;
        const std::vector<double> bd(B.begin(), B.end());
        const std::vector<double> perm = permute_rows_hf_to_gguf(bd, heads, c.head_dim, ll.r);
        for (size_t k = 0; k < B.size(); ++k) B[k] = static_cast<float>(perm[k]);  // exact
      }
      store.emplace_back(std::move(B));
      tensors.push_back({g + ".lora_b", DType::F32, {ll.out, ll.r}, nullptr});
    }
  }
  if (tensors.empty()) throw BadInput("adapter: no LoRA module to export");
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = store[i].data();
  // llama.cpp scales by alpha / rank; the effective alpha makes that equal to our scaling.
  const double alpha = lora.config.scaling() * static_cast<double>(rank);
  const io::GgufMetadata md = {
      {"general.architecture", io::gguf_string(gguf_architecture(c))},
      {"general.type", io::gguf_string("adapter")},
      {"adapter.type", io::gguf_string("lora")},
      {"adapter.lora.alpha", io::gguf_f32(static_cast<float>(alpha))},
      {"general.name", io::gguf_string("medtune LoRA adapter")},
  };
  if (lora.config.use_rslora) {
    rep.notes.push_back("rsLoRA: adapter.lora.alpha holds the effective alpha (alpha * sqrt(r))");
  }
  io::write_gguf(out_path, md, tensors);
  return rep;
}

}  // namespace medtune::model
