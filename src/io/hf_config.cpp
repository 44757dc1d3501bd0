// Hugging Face config.json -> ModelConfig, read as transformers (5.x) reads it.
//
// Defaults are those of transformers' config classes when a field is absent (checked against
// transformers 5.24 LlamaConfig / MistralConfig / Qwen2Config):
//                            llama    mistral   qwen2
//   max_position_embeddings  2048     131072    32768
//   rms_norm_eps             1e-6     1e-6      1e-6
//   rope_theta               10000    10000     10000
//   tie_word_embeddings      false    false     false
//   attention_bias           false    (none)    q/k/v always biased, o_proj not
//   sliding_window           (none)   4096      only when use_sliding_window (then 4096)
//   bos / eos token id       1 / 2    1 / 2     none / none
//   num_key_value_heads      = num_attention_heads, except mistral: 8 (its class default)
//   head_dim                 hidden_size / num_attention_heads when absent or null
// The core dimensions (vocab, hidden, intermediate, layers, heads) are required: transformers
// would fill in 7B-sized defaults, which for a user's file only ever means a broken config.
//
// RoPE: a legacy `rope_scaling` object wins over `rope_parameters` (as in transformers'
// convert_rope_params_to_dict); rope_theta is taken from that object, else the top level, else
// 10000. `type` is the old spelling of `rope_type`. Only "default" and "llama3" are implemented.
#include "io/hf_config.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/whole_file.h"

namespace medtune::io {

namespace {

using nlohmann::json;

// Every dimension must fit comfortably so that products of two (V*C, NH*HD) cannot overflow int64.
constexpr int64_t kMaxDim = int64_t{1} << 31;

const char* json_type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "float";
  return v.type_name();  // "null", "boolean", "string", "array", "object"
}

// Typed access to one JSON object, with messages naming the file and the field.
class Fields {
 public:
  Fields(const json& obj, std::string path, std::string prefix)
      : obj_(obj), path_(std::move(path)), prefix_(std::move(prefix)) {}

  // Present and not null.
  bool has(const std::string& key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw BadInput(path_ + ": field '" + prefix_ + key + "' " + what);
  }
  [[noreturn]] void wrong_type(const std::string& key, const char* want, const json& v) const {
    fail(key, std::string("must be ") + want + ", got " + json_type_name(v));
  }

  int64_t integer(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "is missing");
    return as_integer(key, *v);
  }
  int64_t integer_or(const std::string& key, int64_t fallback) const {
    const json* v = find(key);
    return v ? as_integer(key, *v) : fallback;
  }
  int64_t positive(const std::string& key) const { return check_positive(key, integer(key)); }
  int64_t positive_or(const std::string& key, int64_t fallback) const {
    return check_positive(key, integer_or(key, fallback));
  }
  double number_or(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) wrong_type(key, "a number", *v);
    return v->get<double>();
  }
  double number(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "is missing");
    return number_or(key, 0.0);
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
    return v->get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) wrong_type(key, "a string", *v);
    return v->get<std::string>();
  }

  int64_t as_integer(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, "is too large");
    return v.get<int64_t>();
  }

 private:
  int64_t check_positive(const std::string& key, int64_t v) const {
    if (v <= 0 || v > kMaxDim) fail(key, "must be a positive integer below 2^31, got " + std::to_string(v));
    return v;
  }

  const json& obj_;
  std::string path_;
  std::string prefix_;
};

std::string architecture_of(const json& j, const std::string& path) {
  static const char* kSupported = " (supported: llama, mistral, qwen2)";
  auto mt = j.find("model_type");
  if (mt != j.end() && !mt->is_null()) {
    if (!mt->is_string())
      throw BadInput(path + ": field 'model_type' must be a string, got " + json_type_name(*mt));
    const std::string m = mt->get<std::string>();
    if (m == "llama" || m == "mistral" || m == "qwen2") return m;
    throw BadInput(path + ": unsupported architecture '" + m + "'" + kSupported);
  }
  // Older or hand-written configs may lack model_type; fall back to the class name.
  auto ar = j.find("architectures");
  if (ar != j.end() && ar->is_array() && !ar->empty()) {
    const json& a = (*ar)[0];
    if (!a.is_string())
      throw BadInput(path + ": field 'architectures' must hold strings, got " + json_type_name(a));
    const std::string name = a.get<std::string>();
    if (name == "LlamaForCausalLM") return "llama";
    if (name == "MistralForCausalLM") return "mistral";
    if (name == "Qwen2ForCausalLM") return "qwen2";
    throw BadInput(path + ": unsupported architecture '" + name + "'" + kSupported);
  }
  throw BadInput(path + ": field 'model_type' is missing (and no 'architectures' list)" +
                 std::string(kSupported));
}

// "eos_token_id": one id or a list of them; null or absent: none.
std::vector<int64_t> eos_token_ids(const Fields& f) {
  std::vector<int64_t> ids;
  if (const json* eos = f.find("eos_token_id")) {
    if (eos->is_array()) {
      for (const json& e : *eos) ids.push_back(f.as_integer("eos_token_id", e));
    } else {
      ids.push_back(f.as_integer("eos_token_id", *eos));
    }
  }
  return ids;
}

// Fills c.rope_theta and c.rope_scaling from `rope_scaling` / `rope_parameters` / `rope_theta`.
void read_rope(const json& j, const Fields& top, const std::string& path, ModelConfig& c) {
  c.rope_theta = top.number_or("rope_theta", 10000.0);
  const json* params = nullptr;
  std::string key;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) top.wrong_type(k, "an object or null", *it);
    // transformers: `rope_scaling or rope_parameters` -- an empty object counts as absent.
    if (it->empty()) continue;
    params = &*it;
    key = k;
    break;
  }
  if (!params) return;
  const Fields p(*params, path, key + ".");
  c.rope_theta = p.number_or("rope_theta", c.rope_theta);
  std::string type = p.string_or("rope_type", p.string_or("type", "default"));
  const double partial = p.number_or("partial_rotary_factor", 1.0);
  if (partial != 1.0)
    p.fail("partial_rotary_factor", "= " + std::to_string(partial) +
                                        " is not supported (only full rotary embeddings)");
  if (type == "default") return;
  if (type != "llama3")
    throw BadInput(path + ": field '" + key + ".rope_type' is '" + type +
                   "', which is not supported (supported: default, llama3)");
  RopeScaling& s = c.rope_scaling;
  s.type = "llama3";
  // transformers requires these three for llama3 (KeyError otherwise).
  s.factor = p.number("factor");
  s.low_freq_factor = p.number("low_freq_factor");
  s.high_freq_factor = p.number("high_freq_factor");
  s.original_max_position_embeddings =
      p.positive_or("original_max_position_embeddings", c.max_position_embeddings);
  // The smoothing divides by (high - low) and the wavelengths by each factor.
  if (!(s.factor > 0.0) || !(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor))
    throw BadInput(path + ": field '" + key +
                   "' needs factor > 0 and high_freq_factor > low_freq_factor > 0 for llama3");
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& path) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw BadInput(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw BadInput(path + ": not a JSON object");
  const Fields f(j, path, "");

  ModelConfig c;
  c.architecture = architecture_of(j, path);
  const bool llama = c.architecture == "llama";
  const bool mistral = c.architecture == "mistral";
  const bool qwen2 = c.architecture == "qwen2";

  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.intermediate_size = f.positive("intermediate_size");
  c.num_hidden_layers = f.positive("num_hidden_layers");
  c.num_attention_heads = f.positive("num_attention_heads");
  c.num_key_value_heads = f.positive_or("num_key_value_heads", mistral ? 8 : c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail("num_key_value_heads", "= " + std::to_string(c.num_key_value_heads) +
                                      " must divide num_attention_heads = " +
                                      std::to_string(c.num_attention_heads));
  if (!f.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    f.fail("hidden_size", "= " + std::to_string(c.hidden_size) +
                              " is not a multiple of num_attention_heads = " +
                              std::to_string(c.num_attention_heads) + " and head_dim is not given");
  c.head_dim = f.positive_or("head_dim", c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings =
      f.positive_or("max_position_embeddings", llama ? 2048 : mistral ? 131072 : 32768);
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps >= 0.0)) f.fail("rms_norm_eps", "must be >= 0");
  read_rope(j, f, path, c);
  if (!(c.rope_theta > 0.0)) f.fail("rope_theta", "must be > 0");

  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  // llama: optional bias on q/k/v/o (attention_bias); qwen2: q/k/v always; mistral: never.
  c.attention_bias = qwen2 ? true : llama ? f.boolean_or("attention_bias", false) : false;
  if (llama && f.boolean_or("mlp_bias", false))
    f.fail("mlp_bias", "= true is not supported (MLP projections without bias only)");
  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu") f.fail("hidden_act", "is '" + act + "'; only 'silu' is supported");

  if (mistral) {
    // Present and null means "no window"; absent means the class default.
    auto it = j.find("sliding_window");
    c.sliding_window = it == j.end() ? 4096 : it->is_null() ? 0 : f.positive("sliding_window");
  } else if (qwen2 && f.boolean_or("use_sliding_window", false)) {
    c.sliding_window = f.positive_or("sliding_window", 4096);
  }

  const int64_t default_bos = qwen2 ? -1 : 1;
  c.bos_token_id = f.integer_or("bos_token_id", default_bos);
  c.eos_token_ids = eos_token_ids(f);
  if (!j.contains("eos_token_id") && !qwen2) c.eos_token_ids.push_back(2);
  // transformers 5 writes "dtype"; older versions wrote "torch_dtype".
  c.torch_dtype = f.has("dtype") ? f.string_or("dtype", "") : f.string_or("torch_dtype", "");
  return c;
}

ModelConfig read_hf_config(const std::string& config_json_path) {
  return parse_hf_config(read_whole_file(config_json_path), config_json_path);
}

std::vector<int64_t> read_generation_eos_token_ids(const std::string& generation_config_path) {
  const json j = read_json_file(generation_config_path);
  if (!j.is_object()) throw BadInput(generation_config_path + ": not a JSON object");
  return eos_token_ids(Fields(j, generation_config_path, ""));
}

}  // namespace medtune::io
