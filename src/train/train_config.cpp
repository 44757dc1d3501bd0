// Reading a training config (load_train_config): the YAML file and key=value overrides as entries,
// each key medtune implements read by its checker, axolotl's other keys warned about or refused
// (config_foreign_keys.cpp), and the combinations checked once every key is read. Writing one back
// is train_config_write.cpp's.
#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "backend/device.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/std_regex.h"
#include "core/suggest.h"
#include "train/config_foreign_keys.h"
#include "train/config_names.h"
#include "train/config_value.h"

namespace medtune::train {

using namespace config;  // the readers and names shared with train_config_write.cpp

namespace {

std::string resolve_path(const std::string& p) {
  // Relative to the working directory, as axolotl does; stored absolute so the resolved config in
  // the run directory still points at the same files from anywhere.
  return std::filesystem::absolute(p).lexically_normal().string();
}

// One axolotl key of a dataset entry; false when `k` is not one. Which type reads it is checked
// once the entry's type is known (check_dataset_keys).
bool read_dataset_key(const Entry& e, const std::string& k, const YAML::Node& v, const std::string& name,
                      DatasetSpec& d) {
  for (const auto& key : kDatasetKeys) {
    if (k != key.name) continue;
    d.*key.field = read_string(e, v, name + "." + k);
    if (k == "train_on_eos" &&
        std::find(kTrainOnEos.begin(), kTrainOnEos.end(), d.train_on_eos) == kTrainOnEos.end())
      fail_at(e.where(v), "'" + name + ".train_on_eos' must be turn, all, last or none, got " + got(v));
    return true;
  }
  if (k == "cop_base") {
    const std::string s = read_string(e, v, name + "." + k);
    if (s != "0" && s != "1") fail_at(e.where(v), "'" + name + ".cop_base' must be 0 or 1, got " + got(v));
    d.cop_base = s == "0" ? 0 : 1;
    return true;
  }
  if (k == "roles_to_train") {
    if (!v.IsSequence()) fail_type(e, v, "a list of roles (user, assistant, system, tool)", name + "." + k);
    d.roles_to_train.clear();
    for (const auto& r : v) d.roles_to_train.push_back(read_string(e, r, name + "." + k));
    return true;
  }
  if (k == "message_property_mappings") {
    if (!v.IsMap()) fail_type(e, v, "a mapping {role: FIELD, content: FIELD}", name + "." + k);
    for (const auto& kv : v) {
      const std::string prop = key_name(kv.first, e.where(kv.first), name + "." + k);
      if (prop == "role") d.message_field_role = read_string(e, kv.second, name + "." + k + ".role");
      else if (prop == "content") d.message_field_content = read_string(e, kv.second, name + "." + k + ".content");
      else fail_at(e.where(kv.first), "'" + name + "." + k + "' maps only role and content, got '" + prop + "'");
    }
    return true;
  }
  return false;
}

void check_dataset_keys(const Entry& e, const YAML::Node& item, const std::string& name, const DatasetSpec& d) {
  const DatasetSpec defaults;
  for (const auto& key : kDatasetKeys)
    if (d.*key.field != defaults.*key.field && d.type != key.type)
      fail_at(e.where(item), name + "." + std::string(key.name) + " is a key of type " +
                                 std::string(dataset_type_name(key.type)) + ", not " +
                                 std::string(dataset_type_name(d.type)));
  if (d.cop_base != defaults.cop_base && d.type != DatasetType::kMedmcqa)
    fail_at(e.where(item), name + ".cop_base is a key of type medmcqa, not " + std::string(dataset_type_name(d.type)));
  if (d.roles_to_train != defaults.roles_to_train && d.type != DatasetType::kChatTemplate)
    fail_at(e.where(item), name + ".roles_to_train is a key of type chat_template, not " +
                               std::string(dataset_type_name(d.type)));
}

std::vector<DatasetSpec> read_datasets(const Entry& e) {
  const YAML::Node& list = e.value;
  if (!list.IsSequence()) fail_type(e, list, "a list of {path, type}");
  std::vector<DatasetSpec> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string name = e.key + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) fail_type(e, item, "a mapping {path, type}", name);
    DatasetSpec d;
    bool has_path = false, has_type = false;
    for (const auto& kv : item) {
      const std::string k = key_name(kv.first, e.where(kv.first), name);
      const YAML::Node v = kv.second;
      if (k == "path") {
        d.path = resolve_path(read_string(e, v, name + ".path"));
        has_path = true;
      } else if (k == "type") {
        d.type = read_enum(e, v, kDatasetTypes, name + ".type");
        has_type = true;
      } else if (k == "split") {
        // A Hugging Face datasets split name; a local .jsonl file has only one, so it is ignored.
      } else if (!read_dataset_key(e, k, v, name, d)) {
        std::vector<std::string> valid{"path", "type", "split", "roles_to_train", "message_property_mappings", "cop_base"};
        for (const auto& key : kDatasetKeys) valid.emplace_back(key.name);
        std::string msg = "unknown key '" + k + "' in " + name + " (valid: path, type, split and axolotl's " +
                          "field_*, message_property_mappings, roles_to_train, train_on_eos; medmcqa's cop_base)";
        const std::string guess = closest(k, valid);
        if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
        fail_at(e.where(kv.first), msg);
      }
    }
    if (!has_path) fail_at(e.where(item), name + " has no 'path'");
    if (!has_type)
      fail_at(e.where(item), name + " has no 'type' (medqa, chat, alpaca, completion, input_output, chat_template or "
                                    "one of the nine lm-eval task names, docs/configuration.md)");
    check_dataset_keys(e, item, name, d);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<model::Proj> read_targets(const Entry& e) {
  std::array<bool, model::kNumProj> on{};
  const YAML::Node& n = e.value;
  if (n.IsScalar() && n.Scalar() == "all-linear") {  // PEFT's spelling of "every linear layer"
    on.fill(true);
  } else {
    constexpr std::string_view must =
        "a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj";
    if (!n.IsSequence()) fail_type(e, n, must);
    for (const auto& item : n) {
      bool found = false;
      for (int p = 0; p < model::kNumProj; ++p)
        if (item.IsScalar() && item.Scalar() == model::proj_name(static_cast<model::Proj>(p)))
          on[static_cast<size_t>(p)] = found = true;
      if (!found) {
        std::vector<std::string> names;
        for (int p = 0; p < model::kNumProj; ++p)
          names.emplace_back(model::proj_name(static_cast<model::Proj>(p)));
        std::string msg = "'" + e.key + "' must be " + std::string(must) + ", got " + got(item);
        const std::string guess = item.IsScalar() ? closest(item.Scalar(), names) : "";
        if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
        fail_at(e.where(item), msg);
      }
    }
  }
  std::vector<model::Proj> out;
  for (int p = 0; p < model::kNumProj; ++p)
    if (on[static_cast<size_t>(p)]) out.push_back(static_cast<model::Proj>(p));
  return out;
}

// max_runtime: see parse_duration_s.
int64_t read_duration(const Entry& e) {
  const YAML::Node& n = e.value;
  const std::optional<int64_t> s = n.IsScalar() ? parse_duration_s(n.Scalar()) : std::nullopt;
  if (!s) fail_type(e, n, kDurationMust);
  return *s;
}

// ---- the keys ----

using Setter = void (*)(TrainConfig&, const Entry&);
struct KnownKey {
  std::string_view name;
  Setter set;
};

// val_set_size: a whole number is a count of items, a number with a point or exponent a fraction,
// as in datasets' train_test_split(test_size=...).
void set_val_set_size(TrainConfig& c, const Entry& e) {
  constexpr std::string_view must = "a fraction in [0, 1) or a whole number of items";
  static const std::regex kInt("[+]?[0-9]+");
  const YAML::Node& n = e.value;
  if (n.IsScalar() && n.Scalar().size() <= kMaxRegexText && std::regex_match(n.Scalar(), kInt)) {
    c.val_set_count = read_int(e, must, 0);
    c.val_set_fraction = 0;
  } else {
    c.val_set_fraction = read_float(e, must, [](double x) { return x >= 0 && x < 1; });
    c.val_set_count = 0;
  }
}

// Most keys are a number or a flag stored as it is: described by data, checked by one reader each.
struct IntKey {
  std::string_view name;
  int64_t TrainConfig::*field;
  std::string_view must;
  int64_t lo, hi;
};
enum class Range { kPositive, kNonNegative, kUnit };  // > 0, >= 0, [0, 1)
struct FloatKey {
  std::string_view name;
  double TrainConfig::*field;
  Range range;
};
struct BoolKey {
  std::string_view name;
  bool TrainConfig::*field;
};

constexpr std::string_view kPositiveInt = "a positive integer";
constexpr std::string_view kCount = "an integer >= 0";
constexpr std::array<IntKey, 12> kIntKeys{{
    {"lora_r", &TrainConfig::lora_r, kPositiveInt, 1, kMaxInt},
    {"sequence_len", &TrainConfig::sequence_len, "an integer between 16 and 1048576", 16, 1 << 20},
    {"micro_batch_size", &TrainConfig::micro_batch_size, kPositiveInt, 1, kMaxInt},
    {"gradient_accumulation_steps", &TrainConfig::gradient_accumulation_steps, kPositiveInt, 1,
     kMaxInt},
    {"warmup_steps", &TrainConfig::warmup_steps, kCount, 0, kMaxInt},
    {"seed", &TrainConfig::seed, "an integer in [0, 2^32)", 0, 0xFFFFFFFFLL},
    {"save_steps", &TrainConfig::save_steps, kCount, 0, kMaxInt},
    {"save_total_limit", &TrainConfig::save_total_limit, kCount, 0, kMaxInt},
    {"eval_steps", &TrainConfig::eval_steps, kCount, 0, kMaxInt},
    {"logging_steps", &TrainConfig::logging_steps, kPositiveInt, 1, kMaxInt},
    {"num_threads", &TrainConfig::num_threads, kCount, 0, kMaxInt},
    {"skip_nonfinite_steps", &TrainConfig::skip_nonfinite_steps, kCount, 0, kMaxInt},
}};
constexpr std::array<FloatKey, 9> kFloatKeys{{
    {"lora_alpha", &TrainConfig::lora_alpha, Range::kPositive},
    {"lora_dropout", &TrainConfig::lora_dropout, Range::kUnit},
    {"num_epochs", &TrainConfig::num_epochs, Range::kPositive},
    {"learning_rate", &TrainConfig::learning_rate, Range::kPositive},
    {"weight_decay", &TrainConfig::weight_decay, Range::kNonNegative},
    {"adam_beta1", &TrainConfig::adam_beta1, Range::kUnit},
    {"adam_beta2", &TrainConfig::adam_beta2, Range::kUnit},
    {"adam_epsilon", &TrainConfig::adam_epsilon, Range::kNonNegative},
    {"max_grad_norm", &TrainConfig::max_grad_norm, Range::kNonNegative},  // 0: no clipping
}};
constexpr std::array<BoolKey, 9> kBoolKeys{{
    {"load_in_4bit", &TrainConfig::load_in_4bit},
    {"peft_use_rslora", &TrainConfig::peft_use_rslora},
    {"sample_packing", &TrainConfig::sample_packing},
    {"group_by_length", &TrainConfig::group_by_length},
    {"train_on_inputs", &TrainConfig::train_on_inputs},
    {"skip_invalid", &TrainConfig::skip_invalid},
    {"gradient_checkpointing", &TrainConfig::gradient_checkpointing},
    {"lora_target_linear", nullptr},  // resolved with lora_target_modules
    {"auto_resume_from_checkpoints",
     nullptr},  // axolotl's spelling of resume_from_checkpoint: auto
}};

double read_float(const Entry& e, Range r) {
  switch (r) {
    case Range::kPositive:
      return read_float(e, "a number > 0", [](double x) { return x > 0; });
    case Range::kNonNegative:
      return read_float(e, "a number >= 0", [](double x) { return x >= 0; });
    case Range::kUnit:
      return read_float(e, "a number in [0, 1)", [](double x) { return x >= 0 && x < 1; });
  }
  throw Internal("train_config: unknown range");
}

// report_to as transformers takes it: one name or a list. medtune writes TensorBoard event files
// and nothing else; "none" turns reporting off. Any other tracker is refused by name rather than
// ignored, since a user who asked for it would otherwise look for a run that is not there.
bool read_report_to(const Entry& e) {
  const auto one = [&](const YAML::Node& n) {
    const std::string name = read_string(e, n, "report_to");
    if (name == "tensorboard") return true;
    if (name == "none") return false;
    fail_at(e.where(n), "'report_to' value '" + name +
                            "' is not supported: medtune writes TensorBoard event files (tensorboard) or nothing (none)");
  };
  if (!e.value.IsSequence()) return one(e.value);
  bool tensorboard = false;
  for (const auto& n : e.value) tensorboard = one(n) || tensorboard;
  return tensorboard;
}

// The keys with structure or their own rules.
const std::vector<KnownKey>& known_keys() {
  using C = TrainConfig;
  static const std::vector<KnownKey> keys = {
      {"base_model",
       [](C& c, const Entry& e) { c.base_model = resolve_path(read_string(e, e.value)); }},
      {"datasets", [](C& c, const Entry& e) { c.datasets = read_datasets(e); }},
      {"test_datasets", [](C& c, const Entry& e) { c.test_datasets = read_datasets(e); }},
      {"val_set_size", set_val_set_size},
      {"adapter", [](C& c, const Entry& e) { c.adapter = read_enum(e, e.value, kAdapters); }},
      {"base_quant",
       [](C& c, const Entry& e) { c.base_quant = read_enum(e, e.value, kBaseQuants); }},
      {"lora_target_modules",
       [](C& c, const Entry& e) { c.lora_target_modules = read_targets(e); }},
      {"prompt_format",
       [](C& c, const Entry& e) { c.prompt_format = read_enum(e, e.value, kPromptFormats); }},
      {"system_prompt", [](C& c, const Entry& e) { c.system_prompt = read_string(e, e.value); }},
      {"answer_target",
       [](C& c, const Entry& e) { c.answer_target = read_enum(e, e.value, kAnswerTargets); }},
      {"lr_scheduler",
       [](C& c, const Entry& e) { c.lr_scheduler = read_enum(e, e.value, kSchedulers); }},
      {"max_steps",
       [](C& c, const Entry& e) {
         constexpr std::string_view must = "-1 (from num_epochs) or a positive integer";
         c.max_steps = read_int(e, must, -1);
         if (c.max_steps == 0) fail_type(e, e.value, must);
       }},
      {"warmup_ratio", [](C& c, const Entry& e) { c.warmup_ratio = read_float(e, Range::kUnit); }},
      {"output_dir",
       [](C& c, const Entry& e) { c.output_dir = resolve_path(read_string(e, e.value)); }},
      {"report_to", [](C& c, const Entry& e) { c.report_to_tensorboard = read_report_to(e); }},
      {"logging_dir",
       [](C& c, const Entry& e) { c.logging_dir = resolve_path(read_string(e, e.value)); }},
      {"device",
       [](C& c, const Entry& e) {
         const std::string s = read_string(e, e.value);
         try {
           backend::parse_device(s, "device");
         } catch (const BadInput& x) {
           fail_at(e.where(e.value), x.what());
         }
         c.device = s;
       }},
      {"precision",
       [](C& c, const Entry& e) {
         const std::string s = read_string(e, e.value);
         try {
           backend::parse_precision(s, {}, "precision");
         } catch (const BadInput& x) {
           fail_at(e.where(e.value), x.what());
         }
         c.precision = s;
       }},
      {"bf16_weight_copy",
       [](C& c, const Entry& e) {
         c.bf16_weight_copy = std::string(read_enum(e, e.value, kAutoTrueFalse));
       }},
      {"max_device_memory",
       [](C& c, const Entry& e) {
         const YAML::Node& n = e.value;
         if (n.IsScalar() && n.Scalar() == "auto") {
           c.max_device_memory = 0;
           return;
         }
         const std::optional<double> bytes =
             n.IsScalar() ? parse_memory_size(n.Scalar()) : std::nullopt;
         if (!bytes) fail_type(e, n, kMemorySizeMust);
         c.max_device_memory = *bytes;
       }},
      {"max_runtime", [](C& c, const Entry& e) { c.max_runtime_s = read_duration(e); }},
      {"ddp_timeout",
       [](C& c, const Entry& e) { c.ddp_timeout_s = read_float(e, "a number of seconds > 0", [](double x) { return x > 0; }); }},
      {"ddp_reduction",
       [](C& c, const Entry& e) { c.ddp_reduction = std::string(read_enum(e, e.value, kReductions)); }},
      {"resume_from_checkpoint",
       [](C& c, const Entry& e) {
         const std::string s = read_string(e, e.value);
         c.resume_from_checkpoint = s == "auto" ? s : resolve_path(s);
       }},
  };
  return keys;
}

// Every key medtune implements, for suggestions.
std::vector<std::string_view> known_key_names() {
  std::vector<std::string_view> names;
  for (const KnownKey& k : known_keys()) names.push_back(k.name);
  for (const IntKey& k : kIntKeys) names.push_back(k.name);
  for (const FloatKey& k : kFloatKeys) names.push_back(k.name);
  for (const BoolKey& k : kBoolKeys) names.push_back(k.name);
  return names;
}

// Reads e into c when e.key is a key medtune implements; false when it is not one.
bool apply_known(TrainConfig& c, const Entry& e) {
  const bool null = !e.value.IsDefined() || e.value.IsNull();  // null: keep the default
  for (const IntKey& k : kIntKeys)
    if (k.name == e.key) {
      if (!null) c.*k.field = read_int(e, k.must, k.lo, k.hi);
      return true;
    }
  for (const FloatKey& k : kFloatKeys)
    if (k.name == e.key) {
      if (!null) c.*k.field = read_float(e, k.range);
      return true;
    }
  for (const BoolKey& k : kBoolKeys)
    if (k.name == e.key) {
      if (!null) {
        const bool b = read_bool(e);
        if (k.field) c.*k.field = b;
      }
      return true;
    }
  for (const KnownKey& k : known_keys())
    if (k.name == e.key) {
      if (!null) k.set(c, e);
      return true;
    }
  return false;
}

// ---- assembling the config ----

class ConfigBuilder {
 public:
  void add_file(const std::string& path, const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) return;  // an empty file: reported as missing keys
    if (!root.IsMap())
      fail_at(path + ":" + std::to_string(root.Mark().line + 1),
              "a config must be a mapping of key: value");
    for (const auto& kv : root) {
      const std::string where = path + ":" + std::to_string(kv.first.Mark().line + 1);
      Entry e{key_name(kv.first, where, "the config"), kv.second, path, kv.first.Mark().line + 1};
      if (const auto it = index_.find(e.key); it != index_.end())
        fail_at(e.where(), "duplicate key '" + e.key + "' (first at line " +
                               std::to_string(entries_[it->second].line) + ")");
      index_[e.key] = entries_.size();
      entries_.push_back(std::move(e));
    }
  }

  // "key=value": the value is parsed as YAML; a later override of the same key wins.
  void add_override(const std::string& kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      fail_at("command line", "override '" + kv + "' must be key=value (e.g. lora_r=16)");
    Entry e{kv.substr(0, eq), {}, "", 0};
    const std::string text = kv.substr(eq + 1);
    // Flow lists and mappings must parse; anything else that is not a YAML scalar (it holds ": " or
    // " #", say) is taken as the plain string it obviously is: system_prompt=Answer: one letter.
    const bool flow = !text.empty() && (text.front() == '[' || text.front() == '{');
    try {
      e.value = YAML::Load(text);
      if (!flow && !e.value.IsScalar() && !e.value.IsNull()) e.value = YAML::Node(text);
    } catch (const YAML::Exception& ex) {
      if (flow) fail_at("command line", "cannot parse the value of '" + kv + "': " + ex.msg);
      e.value = YAML::Node(text);
    }
    if (const auto it = index_.find(e.key); it != index_.end()) {
      entries_[it->second] = std::move(e);
    } else {
      index_[e.key] = entries_.size();
      entries_.push_back(std::move(e));
    }
  }

  TrainConfig build(const std::string& path) {
    TrainConfig c;
    c.output_dir = resolve_path("./outputs/run");
    for (const Entry& e : entries_) apply(c, e);
    c.warnings = warnings_;  // the keys' own warnings first, in file order; then combinations

    const Entry* warmup_steps = set_entry("warmup_steps");
    const Entry* warmup_ratio = set_entry("warmup_ratio");
    const Entry* load_in_4bit = set_entry("load_in_4bit");
    const Entry* base_quant = set_entry("base_quant");
    const Entry* val_set_size = set_entry("val_set_size");
    const Entry* test_datasets = set_entry("test_datasets");
    const Entry* eval_steps = set_entry("eval_steps");

    if (!set_entry("base_model"))
      fail_at(path, "missing required key 'base_model' (an HF directory or a .gguf file)");
    if (c.datasets.empty())
      fail_at(where_or(set_entry("datasets"), path),
              "missing required key 'datasets' (a list of {path, type})");

    if (warmup_steps && warmup_ratio)
      fail_at(warmup_ratio->where(), "'warmup_ratio' and 'warmup_steps' (" + warmup_steps->where() +
                                         ") are exclusive; set one of them");

    // adapter, load_in_4bit and base_quant say the same thing three ways (axolotl's two keys and
    // medtune's explicit one): QLoRA is a 4-bit NF4 base. Resolve them and reject disagreement.
    const bool qlora = c.adapter == AdapterKind::kQlora;
    if (load_in_4bit && c.load_in_4bit != qlora)
      fail_at(
          load_in_4bit->where(),
          qlora ? "'load_in_4bit: false' contradicts 'adapter: qlora' (QLoRA is a 4-bit base); "
                  "remove one"
                : "'load_in_4bit: true' needs 'adapter: qlora' (a 4-bit base with LoRA is QLoRA)");
    if (base_quant && (c.base_quant == BaseQuant::kNf4) != qlora)
      fail_at(
          base_quant->where(),
          qlora
              ? "'base_quant: none' contradicts 'adapter: qlora' (QLoRA quantizes the base to nf4)"
              : "'base_quant: nf4' needs 'adapter: qlora'");
    c.load_in_4bit = qlora;
    c.base_quant = qlora ? BaseQuant::kNf4 : BaseQuant::kNone;

    if (c.precision == "int8")
      fail_at(where_or(set_entry("precision"), path),
              "'precision: int8' is for inference (eval, generate: quantized activations have no backward); "
              "train with precision: fp32");

    if (const Entry* linear = set_entry("lora_target_linear"); linear && read_bool(*linear))
      c.lora_target_modules =
          read_targets(Entry{"lora_target_linear", YAML::Node("all-linear"), "", 0});
    if (c.lora_target_modules.empty())
      fail_at(where_or(set_entry("lora_target_modules"), path), "'lora_target_modules' is empty");

    if (const Entry* a = set_entry("auto_resume_from_checkpoints");
        a && read_bool(*a) && !set_entry("resume_from_checkpoint"))
      c.resume_from_checkpoint = "auto";

    const bool has_val = c.val_set_fraction > 0 || c.val_set_count > 0;
    if (has_val && !c.test_datasets.empty())
      fail_at(val_set_size->where(), "'val_set_size' and 'test_datasets' (" +
                                         test_datasets->where() +
                                         ") both define the evaluation set; set one of them");
    const bool has_eval_set = has_val || !c.test_datasets.empty();
    if (c.eval_steps > 0 && !has_eval_set)
      fail_at(eval_steps->where(),
              "'eval_steps' needs an evaluation set: set val_set_size or test_datasets");
    if (has_eval_set && c.eval_steps == 0)
      c.warnings.push_back(
          where_or(test_datasets ? test_datasets : val_set_size, path) +
          ": an evaluation set is configured but eval_steps is 0, so it is never used");
    if (c.sample_packing && c.group_by_length)
      c.warnings.push_back(where_or(set_entry("group_by_length"), path) +
                           ": group_by_length has no effect with sample_packing");
    if (const Entry* mdm = set_entry("max_device_memory");
        mdm && c.max_device_memory > 0 && c.device == "cpu")
      c.warnings.push_back(mdm->where() +
                           ": max_device_memory applies to a device (device: gpu); the "
                           "CPU's plan is checked against the memory available");
    if (const Entry* sp = set_entry("system_prompt");
        sp && c.prompt_format == PromptFormat::kLmEval &&
        c.system_prompt != TrainConfig{}.system_prompt)
      c.warnings.push_back(sp->where() + ": system_prompt is used only with prompt_format: chat");
    return c;
  }

 private:
  void apply(TrainConfig& c, const Entry& e) {
    if (apply_known(c, e)) return;
    if (e.key == "optimizer") {
      if (is_set(e.value)) check_optimizer(e, warnings_);
      return;
    }
    for (const ForeignKey& f : foreign_keys()) {
      if (f.name != e.key) continue;
      if (!is_set(e.value)) return;
      if (f.effect == Effect::kReject)
        fail_at(e.where(),
                "'" + e.key + "' is not supported by medtune (" + std::string(f.why) + ")");
      warnings_.push_back(e.where() + ": '" + e.key + "' ignored: " + std::string(f.why));
      return;
    }
    fail_at(e.where(), unknown_key_message(e.key, known_key_names()));
  }

  // The entry of `key` when it holds a value (not null), else nullptr.
  const Entry* set_entry(const std::string& key) const {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    const Entry& e = entries_[it->second];
    return e.value.IsDefined() && !e.value.IsNull() ? &e : nullptr;
  }

  static std::string where_or(const Entry* e, const std::string& path) {
    return e ? e->where() : path;
  }

  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::vector<std::string> warnings_;
};

}  // namespace

std::string_view adapter_name(AdapterKind a) {
  return name_of(a, kAdapters);
}
std::string_view base_quant_name(BaseQuant q) {
  return name_of(q, kBaseQuants);
}
bool is_lm_eval_task_type(DatasetType t) {
  return t >= DatasetType::kMedqa4Options && t <= DatasetType::kMmluProfessionalMedicine;
}

std::string_view dataset_type_name(DatasetType t) {
  return name_of(t, kDatasetTypes);
}
std::string_view prompt_format_name(PromptFormat f) {
  return name_of(f, kPromptFormats);
}

std::string_view answer_target_name(AnswerTarget t) { return name_of(t, kAnswerTargets); }

TrainConfig load_train_config(const std::string& yaml_path,
                              const std::vector<std::string>& overrides) {
  require_input_file(yaml_path, "config");
  std::ifstream in(yaml_path);
  if (!in) throw BadInput(yaml_path + ": cannot read the config file");
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::ParserException& ex) {
    fail_at(yaml_path + ":" + std::to_string(ex.mark.line + 1) + ":" +
                std::to_string(ex.mark.column + 1),
            "YAML syntax error: " + ex.msg);
  }
  ConfigBuilder b;
  b.add_file(yaml_path, root);
  for (const std::string& kv : overrides) b.add_override(kv);
  return b.build(yaml_path);
}

std::optional<int64_t> parse_duration_s(std::string_view text) {
  static const std::regex kDuration("([0-9]+[dhms])+|[0-9]+");
  if (text.size() > kMaxRegexText || !std::regex_match(text.begin(), text.end(), kDuration))
    return std::nullopt;
  int64_t total = 0, number = 0;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      if (number > kMaxInt / 100) return std::nullopt;
      number = number * 10 + (c - '0');
      continue;
    }
    const int64_t unit = c == 'd' ? 86400 : c == 'h' ? 3600 : c == 'm' ? 60 : 1;
    if (number > (kMaxInt - total) / unit) return std::nullopt;
    total += number * unit;
    number = 0;
  }
  if (number > kMaxInt - total) return std::nullopt;
  total += number;
  if (total <= 0) return std::nullopt;
  return total;
}

std::optional<double> parse_memory_size(std::string_view text) {
  static const std::regex kSize("([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)? *([KMGT]i?B|B)?");
  std::match_results<std::string_view::const_iterator> m;
  if (text.size() > kMaxRegexText || !std::regex_match(text.begin(), text.end(), m, kSize))
    return std::nullopt;
  const std::string unit = m[4].str();
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const int power = std::string("KMGT").find(unit[0]) + 1;
    scale = std::pow(unit[1] == 'i' ? 1024.0 : 1000.0, power);
  }
  // Whole bytes, so that format_memory_size gives back text that reads to the same value.
  const double number = std::strtod(std::string(m[1].str() + m[3].str()).c_str(), nullptr);
  const double bytes = std::round(number * scale);
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 0x1p62) return std::nullopt;
  return bytes;
}

std::string format_memory_size(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  char buf[48];
  if (std::fmod(bytes, kGiB) == 0) std::snprintf(buf, sizeof buf, "%.0fGiB", bytes / kGiB);
  else if (std::fmod(bytes, kMiB) == 0) std::snprintf(buf, sizeof buf, "%.0fMiB", bytes / kMiB);
  else std::snprintf(buf, sizeof buf, "%.0f", bytes);
  return buf;
}

std::string logging_dir_of(const TrainConfig& c) {
  return c.logging_dir.empty() ? (std::filesystem::path(c.output_dir) / "runs").string() : c.logging_dir;
}

model::LoraConfig lora_config(const TrainConfig& c) {
  model::LoraConfig l;
  l.r = c.lora_r;
  l.alpha = c.lora_alpha;
  l.dropout = c.lora_dropout;
  l.use_rslora = c.peft_use_rslora;
  l.targets = c.lora_target_modules;
  return l;
}

AdamWConfig adamw_config(const TrainConfig& c) {
  AdamWConfig a;
  a.lr = c.learning_rate;
  a.beta1 = c.adam_beta1;
  a.beta2 = c.adam_beta2;
  a.eps = c.adam_epsilon;
  a.weight_decay = c.weight_decay;
  return a;
}

}  // namespace medtune::train
