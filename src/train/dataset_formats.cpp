#include "train/dataset_formats.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace medtune::train {

namespace {

using nlohmann::json;

std::string or_default(const std::string& value, const char* fallback) { return value.empty() ? fallback : value; }

std::string type_of(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  return "a string";
}

void require_object(const json& record, const std::string& source) {
  if (!record.is_object()) throw BadInput(source + ": a record must be a JSON object, got " + type_of(record));
}

// A string field; `optional` fields that are absent or null read as "" (axolotl: `prompt["input"]
// if "input" in prompt else ""`, and the datasets library fills a column missing in a row with None).
std::string string_field(const json& record, const std::string& field, const std::string& source,
                         bool optional = false) {
  const auto it = record.find(field);
  if (it == record.end() || it->is_null()) {
    if (optional) return "";
    throw BadInput(source + ": field '" + field + "' is missing");
  }
  if (!it->is_string()) throw BadInput(source + ": field '" + field + "' must be a string, got " + type_of(*it));
  return it->get<std::string>();
}

void append(std::vector<int32_t>& ids, std::vector<uint8_t>& trained, const std::vector<int32_t>& more, bool train) {
  ids.insert(ids.end(), more.begin(), more.end());
  trained.insert(trained.end(), more.size(), train ? 1 : 0);
}

// axolotl's PromptTokenizingStrategy._tokenize (prompt_tokenizers.py): the tokenizer with its
// special tokens, truncated to max_length tokens; EOS appended when asked, when the text does not
// already end with it and there is room; a leading BOS stripped when asked. Empty text: no tokens.
std::vector<int32_t> axolotl_tokenize(const std::string& text, const TextCodec& codec, int64_t max_length,
                                      bool add_eos, bool strip_bos) {
  if (text.empty()) return {};
  std::vector<int32_t> ids = codec.encode(text, true);
  if (static_cast<int64_t>(ids.size()) > max_length) ids.resize(static_cast<size_t>(max_length));
  if (ids.empty()) return ids;
  if (add_eos && codec.eos_id >= 0 && ids.back() != codec.eos_id && static_cast<int64_t>(ids.size()) < max_length)
    ids.push_back(codec.eos_id);
  if (strip_bos && codec.bos_id >= 0 && ids.front() == codec.bos_id) ids.erase(ids.begin());
  return ids;
}

// ---- chat_template ----

// axolotl's ChatTemplatePrompter default roles (chat_template.py): ShareGPT's human/gpt and the
// OpenAI names. Unlike axolotl (which passes unknown roles to the template), medtune refuses a
// role outside these: a typo would otherwise silently change what is trained.
std::string map_role(const std::string& role) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kRoles{{
      {"human", "user"}, {"user", "user"}, {"assistant", "assistant"},
      {"gpt", "assistant"}, {"system", "system"}, {"tool", "tool"}}};
  for (const auto& [from, to] : kRoles)
    if (role == from) return std::string(to);
  return "";
}

struct Turn {
  tokenizer::ChatMessage message;
  bool trained = false;
};

// The conversation of a record: field_messages (default "messages"; a record without it but with
// ShareGPT's "conversations" uses that), each message's role and content through
// message_property_mappings (default role/content; a message without "role" but with ShareGPT's
// "from" uses from/value), and a record-level field_system prompt put first when the conversation
// does not start with a system turn (axolotl's get_conversation_thread).
std::vector<tokenizer::ChatMessage> conversation(const json& record, const std::string& source, const DatasetSpec& spec) {
  std::string field = or_default(spec.field_messages, "messages");
  if (spec.field_messages.empty() && !record.contains("messages") && record.contains("conversations"))
    field = "conversations";
  const auto it = record.find(field);
  if (it == record.end() || it->is_null()) throw BadInput(source + ": field '" + field + "' is missing");
  if (!it->is_array()) throw BadInput(source + ": field '" + field + "' must be a list of messages, got " + type_of(*it));
  if (it->empty()) throw BadInput(source + ": field '" + field + "' is an empty conversation");
  std::vector<tokenizer::ChatMessage> turns;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = field + "[" + std::to_string(i) + "]";
    if (!m.is_object()) throw BadInput(source + ": field '" + where + "' must be an object, got " + type_of(m));
    const bool sharegpt = spec.message_field_role.empty() && !m.contains("role") && m.contains("from");
    const std::string role_key = sharegpt ? "from" : or_default(spec.message_field_role, "role");
    const std::string content_key = sharegpt ? "value" : or_default(spec.message_field_content, "content");
    const std::string role = string_field(m, role_key, source + ": " + where);
    const std::string mapped = map_role(role);
    if (mapped.empty())
      throw BadInput(source + ": field '" + where + "." + role_key + "': unknown role '" + role +
                     "' (known: system, user, assistant, tool, and ShareGPT's human, gpt)");
    turns.push_back({mapped, string_field(m, content_key, source + ": " + where)});
  }
  const std::string system_field = or_default(spec.field_system, "system");
  if (turns.front().role != "system" && record.contains(system_field) && !record[system_field].is_null())
    turns.insert(turns.begin(), {"system", string_field(record, system_field, source)});
  return turns;
}

// axolotl's ChatTemplateStrategy.find_turn: where turn `idx`'s content lies in the tokens of the
// conversation up to it, found by rendering it once with its content and once with a dummy and
// comparing the two token lists from the front and from the back. {-1, -1}: not found.
std::pair<int64_t, int64_t> find_turn(const std::vector<tokenizer::ChatMessage>& turns, size_t idx,
                                      const TextCodec& codec) {
  std::vector<tokenizer::ChatMessage> with_dummy(turns.begin(), turns.begin() + static_cast<std::ptrdiff_t>(idx));
  with_dummy.push_back({turns[idx].role, "[[dummy_message]]"});
  const std::vector<tokenizer::ChatMessage> with_content(turns.begin(), turns.begin() + static_cast<std::ptrdiff_t>(idx + 1));
  const auto dummy = codec.encode(codec.apply(with_dummy, false), false);
  const auto full = codec.encode(codec.apply(with_content, false), false);
  if (dummy.empty() || full.empty()) return {-1, -1};
  const size_t n = std::min(dummy.size(), full.size());
  int64_t start = -1, end = -1;
  for (size_t i = 0; i < n; ++i)
    if (dummy[i] != full[i]) {
      start = static_cast<int64_t>(i);
      break;
    }
  if (start < 0) return {-1, -1};
  for (size_t i = 0; i < n; ++i)
    if (dummy[dummy.size() - 1 - i] != full[full.size() - 1 - i]) {
      end = static_cast<int64_t>(full.size() - i);
      break;
    }
  if (end < 0 || end <= start) return {-1, -1};
  return {start, end};
}

// axolotl's find_first_eos_token from start_idx, with Python's indexing: a start of -1 (the turn
// was not found) first looks at the last token, and finding EOS there returns -1 (not found).
int64_t find_first_eos(const std::vector<int32_t>& ids, int64_t start, int32_t eos) {
  for (int64_t i = start; i < static_cast<int64_t>(ids.size()); ++i) {
    const size_t at = i < 0 ? ids.size() + static_cast<size_t>(i) : static_cast<size_t>(i);
    if (!ids.empty() && ids[at] == eos) return i;
  }
  return -1;
}

}  // namespace

bool is_axolotl_type(DatasetType type) {
  return type == DatasetType::kAlpaca || type == DatasetType::kCompletion || type == DatasetType::kInputOutput ||
         type == DatasetType::kChatTemplate;
}

// axolotl type `alpaca`: AlpacaPrompter with the instruct style (prompters.py) under
// InstructionPromptTokenizingStrategy.tokenize_prompt (prompt_tokenizers.py). The prompt is
// tokenized with special tokens and no EOS, the response on its own with EOS and without BOS;
// the prompt is trained only with train_on_inputs, the response always. Each part is cut to
// sequence_len tokens on its own, as axolotl's _tokenize does.
std::vector<Example> alpaca_examples(const json& record, const std::string& source, const DatasetSpec& spec,
                                     const FormatOptions& opt, const TextCodec& codec) {
  require_object(record, source);
  const std::string instruction = string_field(record, or_default(spec.field_instruction, "instruction"), source);
  const std::string input = string_field(record, or_default(spec.field_input, "input"), source, true);
  const std::string output = string_field(record, or_default(spec.field_output, "output"), source);
  std::string prompt;
  if (!input.empty())
    prompt = "Below is an instruction that describes a task, paired with an input that provides further context. "
             "Write a response that appropriately completes the request.\n\n### Instruction:\n" +
             instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
  else
    prompt = "Below is an instruction that describes a task. Write a response that appropriately completes the "
             "request.\n\n### Instruction:\n" +
             instruction + "\n\n### Response:\n";
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  append(ids, trained, axolotl_tokenize(prompt, codec, opt.sequence_len, false, false), opt.train_on_inputs);
  append(ids, trained, axolotl_tokenize(output, codec, opt.sequence_len, true, true), true);
  return {masked_example(ids, trained, source)};
}

// axolotl type `completion` (prompt_strategies/completion.py): the text (field `field`, default
// "text") tokenized with special tokens and EOS, cut to 64 * sequence_len tokens, every token
// trained (train_on_inputs does not apply), and split into pieces of sequence_len tokens. A last
// piece of one token is left out: it predicts nothing.
std::vector<Example> completion_examples(const json& record, const std::string& source, const DatasetSpec& spec,
                                         const FormatOptions& opt, const TextCodec& codec) {
  require_object(record, source);
  const std::string field = or_default(spec.field, "text");
  const std::string text = string_field(record, field, source);
  if (text.empty()) throw BadInput(source + ": field '" + field + "' is empty: nothing to train on");
  const auto ids = axolotl_tokenize(text, codec, 64 * opt.sequence_len, true, false);
  std::vector<Example> out;
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(opt.sequence_len)) {
    const std::vector<int32_t> piece(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                     ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + static_cast<size_t>(opt.sequence_len))));
    if (piece.size() < 2 && !out.empty()) continue;
    out.push_back(masked_example(piece, std::vector<uint8_t>(piece.size(), 1), source));
  }
  return out;
}

// axolotl type `input_output` (prompt_strategies/input_output.py, RawInputOutputStrategy): the
// segments' texts tokenized without special tokens and concatenated, no template, no BOS or EOS
// added; a segment is trained when its label is true or with train_on_inputs.
std::vector<Example> input_output_examples(const json& record, const std::string& source, const DatasetSpec&,
                                           const FormatOptions& opt, const TextCodec& codec) {
  require_object(record, source);
  const auto it = record.find("segments");
  if (it == record.end() || it->is_null()) throw BadInput(source + ": field 'segments' is missing");
  if (!it->is_array()) throw BadInput(source + ": field 'segments' must be a list of {text, label}, got " + type_of(*it));
  if (it->empty()) throw BadInput(source + ": field 'segments' is empty");
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& seg = (*it)[i];
    const std::string where = source + ": segments[" + std::to_string(i) + "]";
    if (!seg.is_object()) throw BadInput(where + " must be an object {text, label}, got " + type_of(seg));
    const std::string text = string_field(seg, "text", where);
    const auto label = seg.find("label");
    if (label == seg.end()) throw BadInput(where + ": field 'label' is missing");
    if (!label->is_boolean()) throw BadInput(where + ": field 'label' must be true or false, got " + type_of(*label));
    append(ids, trained, codec.encode(text, false), label->get<bool>() || opt.train_on_inputs);
  }
  return {masked_example(ids, trained, source)};
}

// axolotl type `chat_template` (prompt_strategies/chat_template.py, ChatTemplateStrategy.
// _tokenize_single_prompt): the whole conversation rendered by the model's chat template and
// tokenized without special tokens; a turn is trained when its role is in roles_to_train (default
// assistant: every assistant turn) or with train_on_inputs, over its content as find_turn
// locates it; the EOS token at most 3 tokens after a turn's content is trained per train_on_eos:
// "turn" (default) after trained turns, "all" after every turn, "last" after the last turn
// looked at, "none" never. (eot_tokens is not a medtune key, so EOT is EOS, as axolotl's default.)
std::vector<Example> chat_template_examples(const json& record, const std::string& source, const DatasetSpec& spec,
                                            const FormatOptions& opt, const TextCodec& codec) {
  require_object(record, source);
  if (!codec.apply) throw BadInput(source + ": type chat_template needs the model's chat template, and it has none");
  const auto turns = conversation(record, source, spec);
  std::vector<std::string> roles_to_train;
  for (const auto& r : spec.roles_to_train) roles_to_train.push_back(map_role(r).empty() ? r : map_role(r));
  const std::vector<int32_t> ids = codec.encode(codec.apply(turns, false), false);
  std::vector<uint8_t> trained(ids.size(), 0);
  int64_t last_eos = -1;
  for (size_t i = 0; i < turns.size(); ++i) {
    const bool train = opt.train_on_inputs ||
                       std::find(roles_to_train.begin(), roles_to_train.end(), turns[i].role) != roles_to_train.end();
    if (!train && spec.train_on_eos != "all") continue;
    const auto [start, end] = find_turn(turns, i, codec);
    if (train && start != -1)
      for (int64_t t = start; t < end && t < static_cast<int64_t>(ids.size()); ++t) trained[static_cast<size_t>(t)] = 1;
    const int64_t eos = codec.eos_id < 0 ? -1 : find_first_eos(ids, end, codec.eos_id);
    if (eos != -1 && std::llabs(eos - end) <= 3) {  // axolotl: "Allow for some template padding"
      last_eos = eos;
      if (spec.train_on_eos == "all" || (spec.train_on_eos == "turn" && train)) trained[static_cast<size_t>(eos)] = 1;
    }
  }
  if (spec.train_on_eos == "last" && last_eos != -1) trained[static_cast<size_t>(last_eos)] = 1;
  return {masked_example(ids, trained, source)};
}

std::vector<Example> record_examples(const json& record, const std::string& source, const DatasetSpec& spec,
                                     const FormatOptions& opt, const TextCodec& codec) {
  switch (spec.type) {
    case DatasetType::kAlpaca: return alpaca_examples(record, source, spec, opt, codec);
    case DatasetType::kCompletion: return completion_examples(record, source, spec, opt, codec);
    case DatasetType::kInputOutput: return input_output_examples(record, source, spec, opt, codec);
    case DatasetType::kChatTemplate: return chat_template_examples(record, source, spec, opt, codec);
    default: throw Internal("record_examples: not an axolotl dataset type");
  }
}

DatasetLoad read_axolotl_dataset(const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec,
                                 bool skip_invalid) {
  DatasetLoad load;
  const std::string what = std::string(dataset_type_name(spec.type)) + " dataset";
  for_each_jsonl_line(spec.path, what, [&](const std::string& line, const std::string& where) {
    try {
      auto examples = record_examples(parse_jsonl_record(line, where), where, spec, opt, codec);
      int64_t cut = 0;
      for (auto& ex : examples) cut += truncate_left(ex, opt.sequence_len) > 0 ? 1 : 0;
      load.truncated += cut;
      for (auto& ex : examples) load.examples.push_back(std::move(ex));
    } catch (const BadInput& e) {
      if (!skip_invalid) throw;
      if (load.skipped++ == 0) load.first_skipped = e.what();
    }
  });
  if (load.examples.empty())
    throw BadInput(spec.path + ": no usable records in the " + what +
                   (load.skipped > 0 ? " (" + std::to_string(load.skipped) + " invalid, first: " + load.first_skipped + ")" : ""));
  return load;
}

LabelledTokens labelled_tokens(const Example& ex) {
  LabelledTokens out;
  out.input_ids = ex.context;
  out.input_ids.insert(out.input_ids.end(), ex.answer.begin(), ex.answer.end());
  out.labels.assign(ex.context.size(), -100);
  for (size_t i = 0; i < ex.answer.size(); ++i) out.labels.push_back(ex.answer_trained(i) ? ex.answer[i] : -100);
  return out;
}

}  // namespace medtune::train
