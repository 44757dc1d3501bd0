#include "train/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"

namespace medtune::train {

int64_t Example::trained_tokens() const {
  if (answer_mask.empty()) return static_cast<int64_t>(answer.size());
  return static_cast<int64_t>(std::count(answer_mask.begin(), answer_mask.end(), uint8_t{1}));
}

Example masked_example(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& trained,
                       const std::string& source) {
  if (tokens.size() != trained.size()) throw Internal("masked_example: tokens and mask differ in length");
  // Token 0 is never a target (nothing precedes it): a record needs a trained token after it.
  if (std::find(trained.begin() + (trained.empty() ? 0 : 1), trained.end(), uint8_t{1}) == trained.end())
    throw BadInput(source + ": nothing to train on (no token of the record after the first is a target)");
  const auto first = std::find(trained.begin(), trained.end(), uint8_t{1});
  const auto cut = first - trained.begin();
  Example ex;
  ex.source = source;
  ex.context.assign(tokens.begin(), tokens.begin() + cut);
  ex.answer.assign(tokens.begin() + cut, tokens.end());
  ex.answer_mask.assign(first, trained.end());
  return ex;
}

int64_t truncate_left(Example& ex, int64_t sequence_len) {
  // A row of T inputs predicts T targets: T + 1 tokens of text.
  const int64_t capacity = sequence_len + 1;
  const auto answer_len = static_cast<int64_t>(ex.answer.size());
  if (!ex.answer_mask.empty()) {
    const int64_t excess = ex.length() - capacity;
    if (excess <= 0) return 0;
    // One context token stays where there is one: it predicts the first target. Without context
    // the first token is trained on from the second position on, as it is untruncated.
    const int64_t keep_context = std::min<int64_t>(1, static_cast<int64_t>(ex.context.size()));
    const int64_t from_context = std::min(excess, static_cast<int64_t>(ex.context.size()) - keep_context);
    ex.context.erase(ex.context.begin(), ex.context.begin() + from_context);
    const int64_t from_answer = excess - from_context;
    ex.answer.resize(static_cast<size_t>(answer_len - from_answer));
    ex.answer_mask.resize(ex.answer.size());
    const size_t first_target = ex.context.empty() ? 1 : 0;  // answer index of the first predicted token
    if (std::find(ex.answer_mask.begin() + static_cast<std::ptrdiff_t>(std::min(first_target, ex.answer_mask.size())),
                  ex.answer_mask.end(), uint8_t{1}) == ex.answer_mask.end())
      throw BadInput(ex.source + ": nothing left to train on after cutting to sequence_len (" +
                     std::to_string(sequence_len) + ")");
    return excess;
  }
  if (answer_len + 1 > capacity) {
    // At least one context token must remain: the first answer token is predicted from it.
    throw BadInput(ex.source + ": the answer alone is " + std::to_string(answer_len) +
                   " tokens, more than sequence_len (" + std::to_string(sequence_len) +
                   ") allows; raise sequence_len or shorten the answer");
  }
  const int64_t excess = ex.length() - capacity;
  if (excess <= 0) return 0;
  ex.context.erase(ex.context.begin(), ex.context.begin() + excess);
  return excess;
}

nlohmann::json parse_jsonl_record(const std::string& line, const std::string& where) {
  nlohmann::json j;
  std::string last_key;  // names the field of a number beyond a double (1e999): fuzz_chat_jsonl
  const auto track_key = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    if (ev == nlohmann::json::parse_event_t::key) last_key = v.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(line, track_key);
  } catch (const nlohmann::json::parse_error& e) {
    throw BadInput(where + ": not valid JSON: " + e.what());
  } catch (const nlohmann::json::out_of_range& e) {
    throw BadInput(where + ": " + (last_key.empty() ? "a number" : "field '" + last_key + "'") +
                   " is out of range: " + e.what());
  }
  return j;
}

void for_each_jsonl_line(const std::string& path, const std::string& what,
                         const std::function<void(const std::string& line, const std::string& where)>& fn) {
  require_input_file(path, what);
  std::ifstream in(path);
  if (!in) throw BadInput(path + ": cannot open the " + what);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    fn(line, path + ":" + std::to_string(line_no));
  }
}

std::vector<ChatRecord> read_chat_jsonl(const std::string& path, std::vector<std::string>* skipped) {
  std::vector<ChatRecord> out;
  const auto read_record = [&](const std::string& line, const std::string& where) {
    const nlohmann::json j = parse_jsonl_record(line, where);
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
      throw BadInput(where + ": field 'messages' (a list of {role, content}) is missing");
    ChatRecord rec;
    rec.source = where;
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        throw BadInput(where + ": field 'messages': every message needs string 'role' and 'content'");
      rec.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    if (rec.messages.size() < 2 || rec.messages.back().role != "assistant")
      throw BadInput(where + ": field 'messages' must end with an 'assistant' message after at least one other");
    out.push_back(std::move(rec));
  };
  for_each_jsonl_line(path, "chat dataset", [&](const std::string& line, const std::string& where) {
    if (!skipped) return read_record(line, where);
    try {
      read_record(line, where);
    } catch (const BadInput& e) {
      skipped->push_back(e.what());
    }
  });
  if (out.empty()) throw BadInput(path + ": no conversations in the chat dataset");
  return out;
}

Example chat_example(const ChatRecord& rec, const ApplyTemplate& apply, const EncodeText& encode) {
  std::vector<tokenizer::ChatMessage> prompt(rec.messages.begin(), rec.messages.end() - 1);
  const std::string context_text = apply(prompt, true);
  const std::string full_text = apply(rec.messages, false);
  if (full_text.compare(0, context_text.size(), context_text) != 0)
    throw BadInput(rec.source + ": the chat template's rendering of the whole conversation does not "
                   "start with its rendering of the prompt; cannot tell the answer apart");
  Example ex;
  ex.source = rec.source;
  ex.context = encode(context_text);
  const std::vector<int32_t> full = encode(full_text);
  if (full.size() > ex.context.size() && std::equal(ex.context.begin(), ex.context.end(), full.begin())) {
    ex.answer.assign(full.begin() + static_cast<std::ptrdiff_t>(ex.context.size()), full.end());
  } else {
    ex.answer = encode(full_text.substr(context_text.size()));
  }
  if (ex.answer.empty()) throw BadInput(rec.source + ": the last assistant message renders to no tokens");
  return ex;
}

uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  // splitmix64 of seed, mixed with salt, twice: avalanche so (s, e) and (s, e + 1) look unrelated.
  auto splitmix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(seed) ^ salt);
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

void fisher_yates(std::vector<int64_t>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(uniform_below(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

Split split_validation(int64_t n, double fraction, int64_t count, uint64_t seed) {
  Split s;
  int64_t nval = count;
  if (fraction > 0) nval = static_cast<int64_t>(std::ceil(fraction * static_cast<double>(n)));
  if (nval <= 0) {
    for (int64_t i = 0; i < n; ++i) s.train.push_back(i);
    return s;
  }
  if (nval >= n)
    throw BadInput("val_set_size: " + std::to_string(nval) + " validation items leave none of the " +
                   std::to_string(n) + " for training");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(mix_seed(seed, 0x76616c /* "val" */));
  fisher_yates(perm, rng);
  std::vector<char> is_val(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < nval; ++i) is_val[static_cast<size_t>(perm[static_cast<size_t>(i)])] = 1;
  for (int64_t i = 0; i < n; ++i) (is_val[static_cast<size_t>(i)] ? s.val : s.train).push_back(i);
  return s;
}

}  // namespace medtune::train
