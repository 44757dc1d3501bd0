// PEFT LoRA adapter directories. What we accept is deliberately narrow: an adapter we load must
// compute exactly what PeftModel.from_pretrained computes, so every config option that changes
// the forward pass and that we do not implement is refused by name rather than ignored.
#include "io/peft_adapter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/tensor_convert.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace medtune::io {

namespace {

using nlohmann::json;

constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";
constexpr const char* kPickleName = "adapter_model.bin";
// PEFT's state-dict prefix for a PeftModelForCausalLM (the LoraModel wraps the HF model as .model).
constexpr std::string_view kPrefix = "base_model.model.";
constexpr std::string_view kSuffixA = ".lora_A.weight";
constexpr std::string_view kSuffixB = ".lora_B.weight";
// The PEFT release whose adapter_config.json field set we write.
constexpr const char* kPeftVersion = "0.21.2";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw BadInput(path + ": read error");
  return ss.str();
}

// Reading adapter_config.json: typed accessors that name the file and the field on error.
class ConfigReader {
 public:
  ConfigReader(std::string path, const json& j) : path_(std::move(path)), j_(j) {}

  std::string field(const std::string& key) const { return path_ + ": field '" + key + "'"; }

  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  bool is_null_or_absent(const std::string& key) const {
    const json* v = find(key);
    return v == nullptr || v->is_null();
  }
  const json& require(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr) throw BadInput(field(key) + " is missing");
    return *v;
  }
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr && fallback) return *fallback;
    if (v == nullptr) throw BadInput(field(key) + " is missing");
    if (!v->is_number()) throw BadInput(field(key) + " must be a number, got " + v->dump());
    return v->get<double>();
  }
  // Absent or null count as `fallback` (PEFT's defaults).
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) throw BadInput(field(key) + " must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  // Absent, null, {} and [] are all "not used".
  bool is_empty_collection(const std::string& key) const {
    const json* v = find(key);
    return v == nullptr || v->is_null() || ((v->is_object() || v->is_array()) && v->empty());
  }

 private:
  std::string path_;
  const json& j_;
};

// The option must be off (absent, null, false, or empty) or we refuse the adapter.
void require_off(const ConfigReader& c, const std::string& key, const std::string& what) {
  const json* v = c.find(key);
  if (v == nullptr || v->is_null()) return;
  if (v->is_boolean() && !v->get<bool>()) return;
  if ((v->is_object() || v->is_array()) && v->empty()) return;
  throw BadInput(c.field(key) + " is " + v->dump() + ": " + what + " is not supported yet");
}

// exclude_modules: null, "" and [] are off (PEFT tests it for truth). A string is a regex PEFT
// matches with re.fullmatch; we take only the list form (names matched as target_modules are).
std::vector<std::string> parse_exclude_modules(const ConfigReader& c) {
  const json* v = c.find("exclude_modules");
  if (v == nullptr || v->is_null() || (v->is_string() && v->get<std::string>().empty())) return {};
  if (v->is_string())
    throw BadInput(c.field("exclude_modules") + " is the regex " + v->dump() +
                   ": only a list of module names is supported yet");
  if (!v->is_array())
    throw BadInput(c.field("exclude_modules") + " must be a list of module names, got " +
                   v->dump());
  std::vector<std::string> out;
  for (const json& e : *v) {
    if (!e.is_string() || e.get<std::string>().empty())
      throw BadInput(c.field("exclude_modules") + " must hold non-empty strings, got " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// layers_to_transform: an integer or a list of them; null and [] mean every layer. Negative
// indices are refused: PEFT compares them with the non-negative numbers in module names, so they
// never match (they do not count from the end as in Python), which is surely not what was meant.
std::vector<int64_t> parse_layers_to_transform(const ConfigReader& c) {
  const json* v = c.find("layers_to_transform");
  if (v == nullptr || v->is_null()) return {};
  const auto index = [&](const json& e) {
    const bool fits = e.is_number_unsigned() ? e.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                                             : e.is_number_integer() && e.get<int64_t>() >= 0;
    if (!fits)
      throw BadInput(c.field("layers_to_transform") + " must be a layer index (an integer >= 0) " +
                     "or a list of them, got " + e.dump());
    return e.get<int64_t>();
  };
  if (!v->is_array()) return {index(*v)};
  std::vector<int64_t> out;
  for (const json& e : *v) out.push_back(index(e));
  return out;
}

// layers_pattern: null, "" or [] is PEFT's default pattern; otherwise a name or a list of names
// that PEFT splices into a regex in turn (layer_index below). Llama-family models name their
// decoder layers "model.layers.N", so "layers" must be one of them: with any other pattern PEFT
// finds no layer index and adapts nothing. Names only (letters, digits, '_'): a regex would need
// Python's re to decide what it matches. PEFT's LoraConfig refuses a pattern when
// layers_to_transform is null (with [] it accepts it and ignores both).
std::vector<std::string> parse_layers_pattern(const ConfigReader& c, bool has_layers_to_transform) {
  const json* v = c.find("layers_pattern");
  if (v == nullptr || v->is_null() || (v->is_string() && v->get<std::string>().empty()) ||
      (v->is_array() && v->empty()))
    return {};
  if (!v->is_string() && !v->is_array())
    throw BadInput(c.field("layers_pattern") + " must be a string or a list of strings, got " +
                   v->dump());
  std::vector<std::string> out;
  for (const json& e : v->is_array() ? *v : json::array({*v})) {
    const bool is_name = e.is_string() && !e.get<std::string>().empty() &&
                         std::ranges::all_of(e.get<std::string>(), [](char ch) {
                           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                         });
    if (!is_name)
      throw BadInput(c.field("layers_pattern") + " holds " + e.dump() +
                     ": only plain names (letters, digits, '_') are supported, not regular "
                     "expressions");
    out.push_back(e.get<std::string>());
  }
  if (std::ranges::find(out, "layers") == out.end())
    throw BadInput(c.field("layers_pattern") + " is " + v->dump() +
                   ": Llama-family models name their decoder layers 'model.layers.N', which this "
                   "pattern does not match (PEFT would adapt no module); use \"layers\" or null");
  if (!has_layers_to_transform)
    throw BadInput(c.field("layers_pattern") + " is " + v->dump() +
                   " but layers_to_transform is not set: PEFT refuses layers_pattern without "
                   "layers_to_transform");
  return out;
}

LoraSpec parse_config(const std::string& path, const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw BadInput(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw BadInput(path + ": not a JSON object");
  const ConfigReader c(path, j);

  const json& type = c.require("peft_type");
  if (!type.is_string() || type.get<std::string>() != "LORA")
    throw BadInput(c.field("peft_type") + " is " + type.dump() +
                   ": only LoRA adapters (\"LORA\") are supported");
  // Other task types wrap the model differently (SEQ_CLS adds a classification head, SEQ_2_SEQ_LM
  // is an encoder-decoder); null loads as a plain PeftModel, which computes the causal LM's logits.
  if (const json* task = c.find("task_type");
      task != nullptr && !task->is_null() && !(task->is_string() && *task == "CAUSAL_LM"))
    throw BadInput(c.field("task_type") + " is " + task->dump() +
                   ": only causal language-model adapters (\"CAUSAL_LM\" or null) are supported");

  LoraSpec s;
  const json& r = c.require("r");
  if (!r.is_number_integer() || r.get<int64_t>() <= 0)
    throw BadInput(c.field("r") + " must be a positive integer, got " + r.dump());
  s.r = r.get<int64_t>();
  s.alpha = c.number("lora_alpha", 8.0);  // PEFT's default lora_alpha
  // PEFT accepts any number, but 0 switches the adapter off and a negative value subtracts it:
  // neither is a trained adapter, so the file is more likely damaged than meant.
  if (!(s.alpha > 0))
    throw BadInput(c.field("lora_alpha") + " is " + c.find("lora_alpha")->dump() +
                   ": must be a positive number (the adapter's scale is lora_alpha / r)");
  s.dropout = c.number("lora_dropout", 0.0);
  s.use_rslora = c.boolean("use_rslora", false);

  if (!c.is_empty_collection("rank_pattern"))
    throw BadInput(c.field("rank_pattern") + " is " + c.find("rank_pattern")->dump() +
                   ": per-module ranks are not supported yet");
  if (!c.is_empty_collection("alpha_pattern"))
    throw BadInput(c.field("alpha_pattern") + " is " + c.find("alpha_pattern")->dump() +
                   ": per-module alphas are not supported yet");
  if (const json* b = c.find("bias"); b != nullptr && !(b->is_string() && *b == "none"))
    throw BadInput(c.field("bias") + " is " + b->dump() +
                   ": only \"none\" is supported (trained biases are not)");
  if (c.boolean("fan_in_fan_out", false))
    throw BadInput(c.field("fan_in_fan_out") +
                   " is true (GPT-2 style Conv1D weights): not supported for Llama-family models");
  if (c.boolean("use_dora", false))
    throw BadInput(c.field("use_dora") + " is true: DoRA adapters are not supported yet");
  if (!c.is_empty_collection("modules_to_save"))
    throw BadInput(c.field("modules_to_save") + " is " + c.find("modules_to_save")->dump() +
                   ": fully trained extra modules are not supported yet");
  require_off(c, "lora_bias", "a bias on lora_B");
  require_off(c, "use_qalora", "QA-LoRA");
  require_off(c, "use_bdlora", "BD-LoRA");
  require_off(c, "alora_invocation_tokens", "activated LoRA (aLoRA)");
  require_off(c, "layer_replication", "layer replication");
  require_off(c, "trainable_token_indices", "training selected token embeddings");
  require_off(c, "target_parameters", "LoRA on nn.Parameter targets");

  // Modes that rewrite the base model's weights when PEFT loads the adapter; we would compute
  // with the original weights and get different logits.
  if (const json* init = c.find("init_lora_weights"); init != nullptr && !init->is_null()) {
    static const std::set<std::string> kPlainInits = {"gaussian", "orthogonal", "eva"};
    if (!init->is_boolean() && !(init->is_string() && kPlainInits.count(init->get<std::string>())))
      throw BadInput(c.field("init_lora_weights") + " is " + init->dump() +
                     ": initialisations that modify the base weights (PiSSA, OLoRA, LoftQ, "
                     "CorDA, ...) are not supported; convert the adapter to plain LoRA first");
  }

  const json& targets = c.require("target_modules");
  if (targets.is_string())
    throw BadInput(c.field("target_modules") + " is the regex " + targets.dump() +
                   ": only a list of module names is supported yet");
  if (!targets.is_array())
    throw BadInput(c.field("target_modules") + " must be a list of module names, got " +
                   targets.dump());
  for (const json& t : targets) {
    if (!t.is_string() || t.get<std::string>().empty())
      throw BadInput(c.field("target_modules") + " must hold non-empty strings, got " + t.dump());
    s.target_modules.push_back(t.get<std::string>());
  }
  s.exclude_modules = parse_exclude_modules(c);
  s.layers_to_transform = parse_layers_to_transform(c);
  s.layers_pattern = parse_layers_pattern(c, !c.is_null_or_absent("layers_to_transform"));

  if (const json* b = c.find("base_model_name_or_path"); b != nullptr && !b->is_null()) {
    if (!b->is_string())
      throw BadInput(c.field("base_model_name_or_path") + " must be a string or null");
    s.base_model_name_or_path = b->get<std::string>();
  }
  return s;
}

// PEFT's rule for a list of module names (target_modules, exclude_modules): the module's full
// name equals one, or ends with "." + one (peft.tuners.tuners_utils.check_target_module_exists).
bool ends_with_name(const std::string& module, const std::string& name) {
  return module.size() > name.size() && module.ends_with(name) &&
         module[module.size() - name.size() - 1] == '.';
}
bool names_module(const std::vector<std::string>& names, const std::string& module) {
  return std::ranges::any_of(
      names, [&](const std::string& n) { return module == n || ends_with_name(module, n); });
}

// The layer index PEFT 0.21 reads from a module name: with the default pattern
// re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", module), else
// re.match(rf"(?:^|.*?\.){p}\.(?P<idx>\d+)\.", module) for each pattern p in turn, the first that
// matches deciding. The lazy ".*?" makes it the first place (PEFT chose this so that
// "layers.1.experts.0" gives the layer, not the expert) where a name component, preceded by '.'
// (or, for an explicit pattern, at the start) and equal to p (any component for the default), is
// followed by an all-digit component that is itself followed by '.'. p is a plain name here
// (parse_layers_pattern), so the regex matches it literally. Returned as the digits without leading
// zeros (Python's int()), so that any length compares exactly with the listed layers; nullopt when
// no pattern matches.
std::optional<std::string> layer_index(const std::string& module,
                                       const std::vector<std::string>& patterns) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = module.find('.', start);
    parts.push_back(module.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  const auto digits = [](const std::string& x) {
    return !x.empty() && std::ranges::all_of(x, [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  const auto find = [&](const std::string* pattern) -> std::optional<std::string> {
    // parts[j + 1] is followed by '.' iff j + 2 < size.
    for (size_t j = pattern == nullptr ? 1 : 0; j + 2 < parts.size(); ++j) {
      if ((pattern == nullptr || parts[j] == *pattern) && digits(parts[j + 1])) {
        const std::string& d = parts[j + 1];
        const size_t nz = d.find_first_not_of('0');
        return nz == std::string::npos ? "0" : d.substr(nz);
      }
    }
    return std::nullopt;
  };
  if (patterns.empty()) return find(nullptr);
  for (const std::string& p : patterns)
    if (auto i = find(&p)) return i;
  return std::nullopt;
}

enum class Verdict { adapted, not_targeted, excluded, no_layer_index, layer_not_listed };

// check_target_module_exists, in PEFT's order: exclude_modules first; a module named in full in
// target_modules is adapted whatever layers_to_transform says (PEFT applies the layer filter to
// suffix matches only); then the layer filter. `layer` receives the index when one was read.
Verdict peft_verdict(const LoraSpec& s, const std::string& module, std::string* layer = nullptr) {
  if (names_module(s.exclude_modules, module)) return Verdict::excluded;
  if (std::ranges::find(s.target_modules, module) != s.target_modules.end())
    return Verdict::adapted;
  if (!std::ranges::any_of(s.target_modules,
                           [&](const std::string& t) { return ends_with_name(module, t); }))
    return Verdict::not_targeted;
  if (s.layers_to_transform.empty()) return Verdict::adapted;
  const std::optional<std::string> index = layer_index(module, s.layers_pattern);
  if (!index) return Verdict::no_layer_index;
  if (layer != nullptr) *layer = *index;
  const bool listed = std::ranges::any_of(s.layers_to_transform,
                                          [&](int64_t l) { return std::to_string(l) == *index; });
  return listed ? Verdict::adapted : Verdict::layer_not_listed;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string list_str(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<float> widen(const std::string& path, const RawTensor& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw BadInput(path + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                   "; LoRA weights must be F32, F16 or BF16");
  return tensor_to_f32(t);
}

// "base_model.model." + module + suffix. Built by appending: GCC 12's -Wrestrict misfires on
// the equivalent chain of operator+ once inlined.
std::string tensor_name(const std::string& module, std::string_view suffix) {
  std::string s;
  s.reserve(kPrefix.size() + module.size() + suffix.size());
  s.append(kPrefix).append(module).append(suffix);
  return s;
}

}  // namespace

double PeftAdapter::scaling() const {
  const auto r = static_cast<double>(spec.r);
  return spec.use_rslora ? spec.alpha / std::sqrt(r) : spec.alpha / r;
}

LoraSpec read_peft_adapter_config(const std::string& config_path) {
  return parse_config(config_path, read_text(config_path));
}

bool peft_adapts_module(const LoraSpec& spec, const std::string& module) {
  return peft_verdict(spec, module) == Verdict::adapted;
}

PeftAdapter read_peft_adapter(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw BadInput(dir + ": not a directory (expected a PEFT adapter)");
  const std::string config_path = (d / kConfigName).string();
  const std::string weights_path = (d / kWeightsName).string();
  if (!fs::is_regular_file(config_path))
    throw BadInput(config_path + ": missing (not a PEFT adapter directory?)");
  if (!fs::is_regular_file(weights_path)) {
    if (fs::is_regular_file(d / kPickleName))
      throw BadInput((d / kPickleName).string() +
                     ": only safetensors adapters are supported; convert with PEFT: "
                     "PeftModel.from_pretrained(base, dir).save_pretrained(out_dir, "
                     "safe_serialization=True)");
    throw BadInput(weights_path + ": missing");
  }

  PeftAdapter a;
  a.spec = read_peft_adapter_config(config_path);
  const int64_t r = a.spec.r;

  const SafetensorsFile f = read_safetensors(weights_path);
  // module -> (lora_A, lora_B); std::map keeps the pairs sorted by module name.
  std::map<std::string, std::pair<const RawTensor*, const RawTensor*>> by_module;
  for (const auto& [name, t] : f.tensors) {
    const bool is_a = name.ends_with(kSuffixA), is_b = name.ends_with(kSuffixB);
    const size_t suffix = is_a ? kSuffixA.size() : kSuffixB.size();
    if (!name.starts_with(kPrefix) || !(is_a || is_b) || name.size() <= kPrefix.size() + suffix)
      throw BadInput(weights_path + ": tensor '" + name +
                     "' is not a LoRA weight (expected 'base_model.model.<module>.lora_A.weight' "
                     "or '.lora_B.weight')");
    const std::string module = name.substr(kPrefix.size(), name.size() - kPrefix.size() - suffix);
    // A tensor for a module PEFT does not adapt would be dropped by PEFT without a word; the file
    // disagrees with its own config, so we refuse it rather than guess which one is right.
    const std::string what =
        weights_path + ": tensor '" + name + "' adapts module '" + module + "'";
    std::string layer;
    switch (peft_verdict(a.spec, module, &layer)) {
      case Verdict::adapted:
        break;
      case Verdict::not_targeted:
        throw BadInput(what + ", which target_modules " + list_str(a.spec.target_modules) + " in " +
                       config_path + " does not name");
      case Verdict::excluded:
        throw BadInput(what + ", which exclude_modules " + list_str(a.spec.exclude_modules) +
                       " in " + config_path + " excludes (PEFT would not load this tensor)");
      case Verdict::no_layer_index:
        throw BadInput(what + ", in whose name " +
                       (a.spec.layers_pattern.empty()
                            ? std::string("PEFT's default layers pattern")
                            : "layers_pattern " + list_str(a.spec.layers_pattern)) +
                       " finds no layer index, so with layers_to_transform " +
                       list_str(a.spec.layers_to_transform) + " in " + config_path +
                       " PEFT would not adapt it");
      case Verdict::layer_not_listed:
        throw BadInput(what + " in layer " + layer + ", which layers_to_transform " +
                       list_str(a.spec.layers_to_transform) + " in " + config_path +
                       " does not list (PEFT would not load this tensor)");
    }
    if (t.shape.size() != 2)
      throw BadInput(weights_path + ": tensor '" + name + "' has shape " + shape_str(t.shape) +
                     ", expected 2 dimensions");
    auto& slot = by_module[module];
    (is_a ? slot.first : slot.second) = &t;
  }
  if (by_module.empty()) throw BadInput(weights_path + ": holds no LoRA weights");

  for (const auto& [module, ab] : by_module) {
    const std::string stem = std::string(kPrefix) + module;
    if (ab.first == nullptr)
      throw BadInput(weights_path + ": tensor '" + stem + ".lora_B.weight' has no matching '" +
                     stem + ".lora_A.weight'");
    if (ab.second == nullptr)
      throw BadInput(weights_path + ": tensor '" + stem + ".lora_A.weight' has no matching '" +
                     stem + ".lora_B.weight'");
    const RawTensor& ta = *ab.first;
    const RawTensor& tb = *ab.second;
    if (ta.shape[0] != tb.shape[1])
      throw BadInput(weights_path + ": module '" + module + "': lora_A " + shape_str(ta.shape) +
                     " and lora_B " + shape_str(tb.shape) +
                     " disagree on the rank (lora_A.shape[0] must equal lora_B.shape[1])");
    if (ta.shape[0] != r)
      throw BadInput(weights_path + ": module '" + module + "': rank " +
                     std::to_string(ta.shape[0]) + " (lora_A " + shape_str(ta.shape) +
                     ") differs from r = " + std::to_string(r) + " in " + config_path);
    LoraTensorPair p;
    p.module = module;
    p.r = r;
    p.in = ta.shape[1];
    p.out = tb.shape[0];
    p.A = widen(weights_path, ta);
    p.B = widen(weights_path, tb);
    a.pairs.push_back(std::move(p));
  }
  return a;
}

std::string peft_adapter_config_json(const LoraSpec& s) {
  // The field set PEFT 0.21.2's LoraConfig.to_dict() produces for a LoRA on a causal LM,
  // defaults everywhere except what LoraSpec carries. init_lora_weights is true (PEFT's default):
  // PEFT creates a LoRA layer for every targeted module before loading the tensors, and with
  // true any module missing from the file keeps B = 0, i.e. changes nothing.
  json j = json::object();
  j["alora_invocation_tokens"] = nullptr;
  j["alpha_pattern"] = json::object();
  j["arrow_config"] = nullptr;
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] =
      s.base_model_name_or_path.empty() ? json(nullptr) : json(s.base_model_name_or_path);
  j["bias"] = "none";
  j["corda_config"] = nullptr;
  j["ensure_weight_tying"] = false;
  j["eva_config"] = nullptr;
  // exclude_modules, layers_pattern, layers_to_transform: null whatever the spec holds, so PEFT
  // loads every pair we write (peft_adapter.h, write_peft_adapter).
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["kasa_config"] = nullptr;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  // PEFT configs carry lora_alpha as an int in practice; keep that form when it is integral.
  if (std::isfinite(s.alpha) && s.alpha == std::floor(s.alpha) && std::fabs(s.alpha) < 1e15)
    j["lora_alpha"] = static_cast<int64_t>(s.alpha);
  else
    j["lora_alpha"] = s.alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = s.dropout;
  j["lora_ga_config"] = nullptr;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["monteclora_config"] = nullptr;
  j["peft_type"] = "LORA";
  j["peft_version"] = kPeftVersion;
  j["qalora_group_size"] = 16;
  j["r"] = s.r;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  j["target_modules"] = s.target_modules;
  j["target_parameters"] = nullptr;
  j["task_type"] = "CAUSAL_LM";
  j["trainable_token_indices"] = nullptr;
  j["use_bdlora"] = nullptr;
  j["use_dora"] = false;
  j["use_qalora"] = false;
  j["use_rslora"] = s.use_rslora;
  j["velora_config"] = nullptr;
  // json.dumps(indent=2, sort_keys=True) with Python's default ensure_ascii=True; nlohmann's
  // object is a std::map, so keys come out sorted too. No trailing newline, as PEFT.
  return j.dump(2, ' ', true);
}

void write_peft_adapter(const std::string& dir, const PeftAdapter& adapter,
                        const std::map<std::string, std::string>& safetensors_metadata) {
  const LoraSpec& s = adapter.spec;
  if (s.r <= 0) throw Internal("write_peft_adapter: r = " + std::to_string(s.r));
  std::set<std::string> modules;
  for (const LoraTensorPair& p : adapter.pairs) {
    const std::string where = "write_peft_adapter: module '" + p.module + "'";
    if (p.module.empty()) throw Internal("write_peft_adapter: a pair has an empty module name");
    if (!modules.insert(p.module).second) throw Internal(where + " appears twice");
    if (p.r != s.r)
      throw Internal(where + ": r = " + std::to_string(p.r) + " but spec.r = " + std::to_string(s.r));
    if (p.in <= 0 || p.out <= 0 || p.A.size() != static_cast<size_t>(p.r * p.in) ||
        p.B.size() != static_cast<size_t>(p.out * p.r))
      throw Internal(where + ": A has " + std::to_string(p.A.size()) + " values for (" +
                     std::to_string(p.r) + ", " + std::to_string(p.in) + "), B has " +
                     std::to_string(p.B.size()) + " for (" + std::to_string(p.out) + ", " +
                     std::to_string(p.r) + ")");
  }
  std::vector<TensorToWrite> tensors;
  for (const LoraTensorPair& p : adapter.pairs) {
    tensors.push_back({tensor_name(p.module, kSuffixA), DType::F32, {p.r, p.in}, p.A.data()});
    tensors.push_back({tensor_name(p.module, kSuffixB), DType::F32, {p.out, p.r}, p.B.data()});
  }
  std::map<std::string, std::string> metadata = safetensors_metadata;
  // PEFT writes {"format": "pt"}; transformers' loaders check this entry.
  metadata.emplace("format", "pt");

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw BadInput(dir + ": cannot create directory: " + ec.message());
  const std::filesystem::path d(dir);
  write_safetensors((d / kWeightsName).string(), tensors, metadata);
  atomic_write_file((d / kConfigName).string(), peft_adapter_config_json(s));
}

}  // namespace medtune::io
