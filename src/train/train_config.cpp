#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
// GCC 12 with -fsanitize=address reports -Wmaybe-uninitialized inside libstdc++'s <regex>
// (std::function moved in _NFA::_M_insert_subexpr_*): a false positive in the library, silenced
// for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <sstream>
#include <string>
#include <string_view>

#include "backend/device.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/suggest.h"

namespace medtune::train {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// One top-level key of the config with its value and where it was written, so every message can
// point at the line to fix.
struct Entry {
  std::string key;
  YAML::Node value;
  std::string file;  // the config path as the user gave it; empty for a command-line override
  int line = 0;      // 1-based line of the key in `file`

  bool from_command_line() const { return file.empty(); }
  std::string where() const {
    return from_command_line() ? "command line" : file + ":" + std::to_string(line);
  }
  // Where a node inside the value is (a dataset's `type:` sits on its own line).
  std::string where(const YAML::Node& n) const {
    if (from_command_line() || n.Mark().is_null()) return where();
    return file + ":" + std::to_string(n.Mark().line + 1);
  }
};

std::string got(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

[[noreturn]] void fail_at(const std::string& where, const std::string& message) {
  throw BadInput(where + ": " + message);
}

[[noreturn]] void fail_type(const Entry& e, const YAML::Node& n, std::string_view must,
                            const std::string& name = "") {
  fail_at(e.where(n), "'" + (name.empty() ? e.key : name) + "' must be " + std::string(must) +
                          ", got " + got(n));
}

// A mapping key as text. YAML allows a list or a mapping as a key (`[a, b]: 1`), where yaml-cpp's
// as<std::string> throws its own exception (found by fuzz/fuzz_train_config); keys are names.
std::string key_name(const YAML::Node& key, const std::string& where, const std::string& of) {
  if (key.IsSequence() || key.IsMap())
    fail_at(where, "a key of " + of + " must be a name, got " + got(key));
  return key.as<std::string>();
}

// ---- scalars, read with YAML's core-schema rules (quoted numbers are accepted, as pydantic does
// for axolotl) ----

bool is_set(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return false;
  if (n.IsScalar()) {
    bool b = true;
    if (YAML::convert<bool>::decode(n, b) && !b) return false;
    return !n.Scalar().empty();
  }
  return n.size() > 0;
}

// libstdc++'s std::regex matches by recursion, frames per character: a 50,000-digit lora_r
// overflowed the stack. Longer text is never a number, a duration or a plain word.
constexpr size_t kMaxRegexText = 256;

int64_t read_int(const Entry& e, std::string_view must, int64_t lo, int64_t hi = kMaxInt) {
  const YAML::Node& n = e.value;
  static const std::regex kInt("[-+]?[0-9]+");
  if (!n.IsScalar() || n.Scalar().size() > kMaxRegexText || !std::regex_match(n.Scalar(), kInt))
    fail_type(e, n, must);
  std::string_view s = n.Scalar();
  if (s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) fail_type(e, n, must);
  return v;
}

bool parse_float(const std::string& text, double& out) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text.size() > kMaxRegexText || !std::regex_match(text, kFloat)) return false;
  std::string_view s = text;
  if (s.front() == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out);
}

template <typename InRange>
double read_float(const Entry& e, std::string_view must, InRange in_range) {
  double v = 0;
  if (!e.value.IsScalar() || !parse_float(e.value.Scalar(), v) || !in_range(v))
    fail_type(e, e.value, must);
  return v;
}

bool read_bool(const Entry& e) {
  bool b = false;
  if (!e.value.IsScalar() || !YAML::convert<bool>::decode(e.value, b))
    fail_type(e, e.value, "true or false");
  return b;
}

// The offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), or npos. The resolved config is written out as JSON, which
// holds UTF-8 only (found by fuzz/fuzz_train_config).
size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b >= 0xE0 && b <= 0xEF)
      len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
      len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else if (b >= 0x80)
      return i;
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

std::string read_string(const Entry& e, const YAML::Node& n, const std::string& name = "") {
  if (!n.IsScalar() || n.Scalar().empty()) fail_type(e, n, "a non-empty string", name);
  if (const size_t bad = invalid_utf8_at(n.Scalar()); bad != std::string_view::npos)
    fail_at(e.where(n), "'" + (name.empty() ? e.key : name) + "' is not valid UTF-8 (byte " +
                            std::to_string(bad + 1) + " of the value)");
  return n.Scalar();
}

template <typename Enum, size_t N>
Enum read_enum(const Entry& e, const YAML::Node& n,
               const std::array<std::pair<std::string_view, Enum>, N>& names,
               const std::string& name = "") {
  std::string valid;
  for (const auto& [s, v] : names) valid += (valid.empty() ? "" : ", ") + std::string(s);
  if (n.IsScalar())
    for (const auto& [s, v] : names)
      if (s == n.Scalar()) return v;
  std::string msg =
      "'" + (name.empty() ? e.key : name) + "' must be one of " + valid + ", got " + got(n);
  if (n.IsScalar()) {
    std::vector<std::string_view> words;
    for (const auto& [s, v] : names) words.push_back(s);
    const std::string guess = closest(n.Scalar(), words);
    if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
  }
  fail_at(e.where(n), msg);
}

template <typename Enum, size_t N>
std::string_view name_of(Enum v, const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [s, x] : names)
    if (x == v) return s;
  throw Internal("train_config: enum value without a name");
}

constexpr std::array<std::pair<std::string_view, AdapterKind>, 2> kAdapters{
    {{"lora", AdapterKind::kLora}, {"qlora", AdapterKind::kQlora}}};
constexpr std::array<std::pair<std::string_view, BaseQuant>, 2> kBaseQuants{
    {{"none", BaseQuant::kNone}, {"nf4", BaseQuant::kNf4}}};
// The task names are eval::open_medical_llm_tasks()'s (test_apps TaskDatasetTypes checks it: the
// config is read below eval/ in the build's layering, so it cannot ask).
constexpr std::array<std::pair<std::string_view, DatasetType>, 15> kDatasetTypes{
    {{"medqa", DatasetType::kMedqa},
     {"chat", DatasetType::kChat},
     {"alpaca", DatasetType::kAlpaca},
     {"completion", DatasetType::kCompletion},
     {"input_output", DatasetType::kInputOutput},
     {"chat_template", DatasetType::kChatTemplate},
     {"medqa_4options", DatasetType::kMedqa4Options},
     {"medmcqa", DatasetType::kMedmcqa},
     {"pubmedqa", DatasetType::kPubmedqa},
     {"mmlu_anatomy", DatasetType::kMmluAnatomy},
     {"mmlu_clinical_knowledge", DatasetType::kMmluClinicalKnowledge},
     {"mmlu_college_biology", DatasetType::kMmluCollegeBiology},
     {"mmlu_college_medicine", DatasetType::kMmluCollegeMedicine},
     {"mmlu_medical_genetics", DatasetType::kMmluMedicalGenetics},
     {"mmlu_professional_medicine", DatasetType::kMmluProfessionalMedicine}}};
constexpr std::array<std::pair<std::string_view, PromptFormat>, 2> kPromptFormats{
    {{"lm_eval", PromptFormat::kLmEval}, {"chat", PromptFormat::kChat}}};
constexpr std::array<std::pair<std::string_view, AnswerTarget>, 2> kAnswerTargets{
    {{"letter", AnswerTarget::kLetter}, {"text", AnswerTarget::kText}}};
// cosine_with_min_lr needs min_lr, which configs do not have yet.
constexpr std::array<std::pair<std::string_view, ScheduleKind>, 4> kSchedulers{
    {{"cosine", ScheduleKind::kCosine},
     {"linear", ScheduleKind::kLinear},
     {"constant", ScheduleKind::kConstant},
     {"constant_with_warmup", ScheduleKind::kConstantWithWarmup}}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kAutoTrueFalse{
    {{"auto", "auto"}, {"true", "true"}, {"false", "false"}}};

// How a data-parallel job sums gradients over ranks (dist/gradient_sum.h).
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kReductions{
    {{"auto", "auto"}, {"ordered", "ordered"}, {"allreduce", "allreduce"}}};

std::string resolve_path(const std::string& p) {
  // Relative to the working directory, as axolotl does; stored absolute so the resolved config in
  // the run directory still points at the same files from anywhere.
  return std::filesystem::absolute(p).lexically_normal().string();
}

// The axolotl per-dataset keys that hold a name, each with the type that reads it (a key its
// type does not read would be silently ignored, so it is an error). roles_to_train and
// message_property_mappings are read in read_dataset_key.
struct DatasetKey {
  std::string_view name;
  std::string DatasetSpec::*field;
  DatasetType type;
};
constexpr std::array<DatasetKey, 9> kDatasetKeys{{
    {"field", &DatasetSpec::field, DatasetType::kCompletion},
    {"field_instruction", &DatasetSpec::field_instruction, DatasetType::kAlpaca},
    {"field_input", &DatasetSpec::field_input, DatasetType::kAlpaca},
    {"field_output", &DatasetSpec::field_output, DatasetType::kAlpaca},
    {"field_system", &DatasetSpec::field_system, DatasetType::kChatTemplate},
    {"field_messages", &DatasetSpec::field_messages, DatasetType::kChatTemplate},
    {"message_field_role", &DatasetSpec::message_field_role, DatasetType::kChatTemplate},
    {"message_field_content", &DatasetSpec::message_field_content, DatasetType::kChatTemplate},
    {"train_on_eos", &DatasetSpec::train_on_eos, DatasetType::kChatTemplate},
}};
constexpr std::array<std::string_view, 4> kTrainOnEos{"turn", "all", "last", "none"};

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

// axolotl keys medtune does not implement. kWarn: harmless here (the result is the same), so a set
// value earns a warning; kReject: a set value would change the result, so it is an error. Unset
// values (null, false, empty) are always fine: axolotl's example configs list many keys empty.
enum class Effect { kWarn, kReject };
struct ForeignKey {
  std::string_view name;
  Effect effect;
  std::string_view why;
};

constexpr std::string_view kPrecision =
    "medtune's key is 'precision' (fp32 | bf16 | auto: fp32 on the CPU, bf16 on GPUs)";
constexpr std::string_view kAttention =
    "medtune's attention kernels are its own; the math is the same";
constexpr std::string_view kTracker =
    "medtune logs to the run directory, not to an experiment tracker";
constexpr std::string_view kHub = "medtune does not talk to the Hugging Face Hub";
constexpr std::string_view kArch =
    "medtune reads the architecture and tokenizer from the checkpoint";
constexpr std::string_view kSchedule =
    "medtune's lr schedules have no such option; it would change the result";

const std::vector<ForeignKey>& foreign_keys() {
  static const std::vector<ForeignKey> keys = {
      {"bf16", Effect::kWarn, kPrecision},
      {"fp16", Effect::kWarn, kPrecision},
      {"tf32", Effect::kWarn, kPrecision},
      {"flash_attention", Effect::kWarn, kAttention},
      {"xformers_attention", Effect::kWarn, kAttention},
      {"sdp_attention", Effect::kWarn, kAttention},
      {"flash_attn_cross_entropy", Effect::kWarn, kAttention},
      {"flash_attn_rms_norm", Effect::kWarn, kAttention},
      {"flash_attn_fuse_qkv", Effect::kWarn, kAttention},
      {"flash_attn_fuse_mlp", Effect::kWarn, kAttention},
      {"torch_compile", Effect::kWarn, "medtune is compiled C++"},
      {"wandb_project", Effect::kWarn, kTracker},
      {"wandb_entity", Effect::kWarn, kTracker},
      {"wandb_watch", Effect::kWarn, kTracker},
      {"wandb_name", Effect::kWarn, kTracker},
      {"wandb_run_id", Effect::kWarn, kTracker},
      {"wandb_log_model", Effect::kWarn, kTracker},
      {"wandb_mode", Effect::kWarn, kTracker},
      {"mlflow_tracking_uri", Effect::kWarn, kTracker},
      {"mlflow_experiment_name", Effect::kWarn, kTracker},
      {"hub_model_id", Effect::kWarn, kHub},
      {"hub_strategy", Effect::kWarn, kHub},
      {"push_dataset_to_hub", Effect::kWarn, kHub},
      {"hf_use_auth_token", Effect::kWarn, kHub},
      {"model_type", Effect::kWarn, kArch},
      {"tokenizer_type", Effect::kWarn, kArch},
      {"is_llama_derived_model", Effect::kWarn, kArch},
      {"trust_remote_code", Effect::kWarn, kArch},
      {"dataset_prepared_path", Effect::kWarn, "medtune tokenizes in memory and caches nothing"},
      {"pad_to_sequence_len", Effect::kWarn,
       "padding is masked out of the loss: it changes speed, not results"},
      {"eval_sample_packing", Effect::kWarn, "medtune evaluates without packing"},
      {"eval_batch_size", Effect::kWarn,
       "medtune evaluates with micro_batch_size; scores do not depend on it"},
      {"evals_per_epoch", Effect::kWarn, "use eval_steps"},
      {"saves_per_epoch", Effect::kWarn, "use save_steps"},
      {"eval_table_size", Effect::kWarn, "medtune's eval report is its own"},
      {"save_safetensors", Effect::kWarn, "adapters are always written as safetensors"},
      {"gradient_checkpointing_kwargs", Effect::kWarn, "medtune's recomputation has no options"},
      {"dataloader_num_workers", Effect::kWarn, "medtune loads data in-process"},
      {"dataloader_pin_memory", Effect::kWarn, "medtune loads data in-process"},
      {"dataloader_prefetch_factor", Effect::kWarn, "medtune loads data in-process"},
      {"strict", Effect::kWarn, "medtune is always strict about keys"},
      {"debug", Effect::kWarn, "no meaning in medtune"},
      {"local_rank", Effect::kWarn, "ranks come from the launcher"},
      {"deepspeed", Effect::kReject, "DeepSpeed shards training through PyTorch"},
      {"fsdp", Effect::kReject, "FSDP shards training through PyTorch"},
      {"fsdp_config", Effect::kReject, "FSDP shards training through PyTorch"},
      {"load_in_8bit", Effect::kReject,
       "8-bit (LLM.int8) base weights; adapter: qlora gives a 4-bit NF4 base"},
      {"gptq", Effect::kReject, "GPTQ-quantized bases"},
      {"special_tokens", Effect::kReject, "it changes the tokenizer"},
      {"tokens", Effect::kReject, "it adds tokens to the tokenizer"},
      {"chat_template", Effect::kReject,
       "chat is rendered with the model's own template (see prompt_format)"},
      {"lora_modules_to_save", Effect::kReject, "it trains full embedding or head weights"},
      {"lora_fan_in_fan_out", Effect::kReject, "it is for GPT-2 style Conv1D layers"},
      {"lora_model_dir", Effect::kReject, "continuing from an adapter: use resume_from_checkpoint"},
      {"peft_use_dora", Effect::kReject, "DoRA adapters"},
      {"loraplus_lr_ratio", Effect::kReject, "LoRA+ learning rates"},
      {"loraplus_lr_embedding", Effect::kReject, "LoRA+ learning rates"},
      {"neftune_noise_alpha", Effect::kReject, "it adds noise to the embeddings"},
      {"noisy_embedding_alpha", Effect::kReject, "it adds noise to the embeddings"},
      {"rope_scaling", Effect::kReject, "it changes the model's positions"},
      {"rope_theta", Effect::kReject, "it changes the model's positions"},
      {"unfrozen_parameters", Effect::kReject, "it trains base weights"},
      {"relora_steps", Effect::kReject, "ReLoRA restarts"},
      {"early_stopping_patience", Effect::kReject, "it would stop training early"},
      {"lr_scheduler_kwargs", Effect::kReject, kSchedule},
      {"lr_quadratic_warmup", Effect::kReject, kSchedule},
      {"cosine_min_lr_ratio", Effect::kReject, kSchedule},
      {"cosine_constant_lr_ratio", Effect::kReject, kSchedule},
      {"rl", Effect::kReject, "medtune does supervised fine-tuning only"},
  };
  return keys;
}

// TRL / transformers names people bring along, which edit distance alone would not match.
const std::map<std::string_view, std::string_view>& aliases() {
  static const std::map<std::string_view, std::string_view> m = {
      {"model_name_or_path", "base_model"},
      {"per_device_train_batch_size", "micro_batch_size"},
      {"batch_size", "micro_batch_size"},
      {"num_train_epochs", "num_epochs"},
      {"epochs", "num_epochs"},
      {"max_seq_length", "sequence_len"},
      {"lr", "learning_rate"},
      {"lr_scheduler_type", "lr_scheduler"},
      {"target_modules", "lora_target_modules"},
      {"r", "lora_r"},
  };
  return m;
}

// "unknown key 'lora_rank'; did you mean 'lora_r'?"
std::string unknown_key_message(const std::string& key) {
  std::string msg = "unknown key '" + key + "'";
  std::string guess;
  if (const auto it = aliases().find(key); it != aliases().end()) {
    guess = std::string(it->second);
  } else {
    std::vector<std::string_view> names = known_key_names();
    guess = closest(key, names);
    if (guess.empty()) {
      names.clear();
      for (const ForeignKey& k : foreign_keys()) names.push_back(k.name);
      guess = closest(key, names);
    }
  }
  if (!guess.empty()) msg += "; did you mean '" + guess + "'?";
  return msg + " (docs/configuration.md lists every key)";
}

// axolotl's `optimizer`: the AdamW variants that do the same fp32 update as medtune's are fine.
void check_optimizer(const Entry& e, std::vector<std::string>& warnings) {
  const std::string name = read_string(e, e.value);
  if (name == "adamw_torch") return;
  if (name == "adamw_torch_fused" || name == "adamw_hf" || name == "paged_adamw_32bit") {
    warnings.push_back(e.where() + ": optimizer '" + name +
                       "' runs as adamw_torch (the same fp32 AdamW update)");
    return;
  }
  fail_at(e.where(),
          "optimizer '" + name +
              "' is not supported by medtune (its optimizer is AdamW in fp32: adamw_torch)");
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
    fail_at(e.where(), unknown_key_message(e.key));
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

// Shortest text that reads back as the same double ("0.0002", "1e-08", "16").
std::string number_text(double x) {
  std::array<char, 32> buf{};
  const auto [ptr, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  if (ec != std::errc()) throw Internal("train_config: cannot format a number");
  return std::string(buf.data(), ptr);
}

std::vector<std::string> target_names(const TrainConfig& c) {
  std::vector<std::string> out;
  for (const model::Proj p : c.lora_target_modules) out.emplace_back(model::proj_name(p));
  return out;
}

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

namespace {

// The resolved settings in the order docs/configuration.md groups them; to_json and to_yaml both
// come from here, so a key added once appears in both.
nlohmann::ordered_json resolved(const TrainConfig& c) {
  using nlohmann::ordered_json;
  auto datasets = [](const std::vector<DatasetSpec>& ds) {
    ordered_json out = ordered_json::array();
    const DatasetSpec defaults;
    for (const DatasetSpec& d : ds) {
      ordered_json j{{"path", d.path}, {"type", dataset_type_name(d.type)}};
      // The axolotl keys only where set, so that the resolved config (and a run's identity) of
      // a medqa or chat dataset is what it was before these keys existed.
      for (const auto& key : kDatasetKeys)
        if (d.*key.field != defaults.*key.field) j[std::string(key.name)] = d.*key.field;
      if (d.type == DatasetType::kChatTemplate) {
        j["roles_to_train"] = d.roles_to_train;
        j["train_on_eos"] = d.train_on_eos;
      }
      if (d.cop_base >= 0) j["cop_base"] = std::to_string(d.cop_base);
      out.push_back(std::move(j));
    }
    return out;
  };
  auto optional = [](const std::string& s) { return s.empty() ? ordered_json() : ordered_json(s); };
  ordered_json j;
  j["base_model"] = c.base_model;
  j["adapter"] = adapter_name(c.adapter);
  j["load_in_4bit"] = c.load_in_4bit;
  j["base_quant"] = base_quant_name(c.base_quant);
  j["lora_r"] = c.lora_r;
  j["lora_alpha"] = c.lora_alpha;
  j["lora_dropout"] = c.lora_dropout;
  j["lora_target_modules"] = target_names(c);
  j["peft_use_rslora"] = c.peft_use_rslora;
  j["datasets"] = datasets(c.datasets);
  j["test_datasets"] = datasets(c.test_datasets);
  j["val_set_size"] =
      c.val_set_count > 0 ? ordered_json(c.val_set_count) : ordered_json(c.val_set_fraction);
  j["sequence_len"] = c.sequence_len;
  j["sample_packing"] = c.sample_packing;
  j["group_by_length"] = c.group_by_length;
  j["train_on_inputs"] = c.train_on_inputs;
  j["skip_invalid"] = c.skip_invalid;
  j["prompt_format"] = prompt_format_name(c.prompt_format);
  j["system_prompt"] = c.system_prompt;
  j["answer_target"] = answer_target_name(c.answer_target);
  j["micro_batch_size"] = c.micro_batch_size;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["num_epochs"] = c.num_epochs;
  j["max_steps"] = c.max_steps;
  j["learning_rate"] = c.learning_rate;
  j["lr_scheduler"] = name_of(c.lr_scheduler, kSchedulers);
  if (c.warmup_ratio)
    j["warmup_ratio"] = *c.warmup_ratio;
  else
    j["warmup_steps"] = c.warmup_steps;
  j["weight_decay"] = c.weight_decay;
  j["adam_beta1"] = c.adam_beta1;
  j["adam_beta2"] = c.adam_beta2;
  j["adam_epsilon"] = c.adam_epsilon;
  j["max_grad_norm"] = c.max_grad_norm;
  j["skip_nonfinite_steps"] = c.skip_nonfinite_steps;
  j["gradient_checkpointing"] = c.gradient_checkpointing;
  j["seed"] = c.seed;
  j["output_dir"] = c.output_dir;
  j["save_steps"] = c.save_steps;
  j["save_total_limit"] = c.save_total_limit;
  j["eval_steps"] = c.eval_steps;
  j["logging_steps"] = c.logging_steps;
  j["report_to"] = c.report_to_tensorboard ? "tensorboard" : "none";
  j["logging_dir"] = optional(c.logging_dir);
  j["num_threads"] = c.num_threads;
  j["device"] = c.device;
  j["precision"] = c.precision;
  j["bf16_weight_copy"] = c.bf16_weight_copy;
  j["max_device_memory"] =
      c.max_device_memory > 0 ? format_memory_size(c.max_device_memory) : "auto";
  j["max_runtime"] = optional(c.max_runtime_s > 0 ? std::to_string(c.max_runtime_s) + "s" : "");
  j["ddp_timeout"] = c.ddp_timeout_s > 0 ? ordered_json(c.ddp_timeout_s) : ordered_json(nullptr);
  j["ddp_reduction"] = c.ddp_reduction;
  j["resume_from_checkpoint"] = optional(c.resume_from_checkpoint);
  return j;
}

// A name like `cosine` or `q_proj` is written plain; anything else (paths, prompts, and words YAML
// would read as something else) double-quoted.
bool plain_word(const std::string& s) {
  static const std::regex kWord("[a-z][a-z0-9_]*");
  static const std::regex kYamlWord("y|n|yes|no|on|off|true|false|null");
  return s.size() <= kMaxRegexText && std::regex_match(s, kWord) && !std::regex_match(s, kYamlWord);
}

void emit(YAML::Emitter& out, const nlohmann::ordered_json& v) {
  using nlohmann::ordered_json;
  switch (v.type()) {
    case ordered_json::value_t::null:
      out << YAML::Null;
      break;
    case ordered_json::value_t::boolean:
      out << (v.get<bool>() ? "true" : "false");
      break;
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned:
      out << std::to_string(v.get<int64_t>());
      break;
    case ordered_json::value_t::number_float:
      out << number_text(v.get<double>());
      break;
    case ordered_json::value_t::string: {
      const std::string s = v.get<std::string>();
      if (plain_word(s))
        out << s;
      else
        out << YAML::DoubleQuoted << s;
      break;
    }
    case ordered_json::value_t::array: {
      const bool flat =
          std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_primitive(); });
      out << (flat ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const auto& x : v) emit(out, x);
      out << YAML::EndSeq;
      break;
    }
    case ordered_json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, x] : v.items()) {
        out << YAML::Key << k << YAML::Value;
        emit(out, x);
      }
      out << YAML::EndMap;
      break;
    default:
      throw Internal("train_config: unexpected JSON value");
  }
}

}  // namespace

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

nlohmann::json to_json(const TrainConfig& c) {
  return nlohmann::json(resolved(c));
}

std::string to_yaml(const TrainConfig& c) {
  YAML::Emitter out;
  out << YAML::Comment("medtune train config, resolved (every key explicit; paths absolute)");
  emit(out, resolved(c));
  if (!out.good()) throw Internal("train_config: YAML emitter: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
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
