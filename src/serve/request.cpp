#include "serve/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace medtune::serve {

namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "a value of another type";
  }
}

json parse_object(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw invalid_request("the request body is not valid JSON");
  if (!j.is_object()) throw invalid_request(std::string("the request body must be a JSON object, got ") + type_name(j));
  return j;
}

// A present, non-null field (JSON null means "not given", as the OpenAI clients send it).
const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const json& v, const std::string& param) {
  if (!v.is_string()) throw invalid_request(param + " must be a string, got " + type_name(v), param);
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) throw invalid_request(param + " must be a boolean, got " + type_name(v), param);
  return v.get<bool>();
}

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  // 5.0 is accepted as 5 (JavaScript clients send integers as doubles); 5.5 is not.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      throw invalid_request(param + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "], got " + v.dump(),
                            param);
    return static_cast<int64_t>(d);
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw invalid_request(param + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + v.dump(),
                          param);
  if (!v.is_number_integer())
    throw invalid_request(param + " must be an integer, got " + type_name(v), param);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw invalid_request(param + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(x),
                          param);
  return x;
}

float get_number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) throw invalid_request(param + " must be a number, got " + type_name(v), param);
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    throw invalid_request(param + " must be a number in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
                              v.dump(),
                          param);
  return static_cast<float>(d);
}

// OpenAI's logit_bias: {"token id": bias}, the id a decimal string (no sign, no leading zeros, so
// that two keys never name one token), the bias a number in [-100, 100].
std::vector<std::pair<int32_t, float>> decode_logit_bias(const json& v, int64_t vocab_size) {
  if (!v.is_object())
    throw invalid_request(std::string("logit_bias must be an object, got ") + type_name(v),
                          "logit_bias");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : v.items()) {
    const std::string p = "logit_bias[\"" + key + "\"]";
    const bool canonical = !key.empty() && key.size() <= 10 &&
                           key.find_first_not_of("0123456789") == std::string::npos &&
                           (key == "0" || key[0] != '0');
    const int64_t id = canonical ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab_size)
      throw invalid_request("logit_bias keys must be token ids in [0, " +
                                std::to_string(vocab_size - 1) + "], got \"" + key + "\"",
                            "logit_bias");
    out.emplace_back(static_cast<int32_t>(id), get_number(value, p, -100, 100));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Parameters of OpenAI's API, llama-server's and vLLM's that change what is generated and that this
// server does not implement, each with the one value that asks for nothing (accepted, so that
// clients sending defaults keep working). Any other value is refused by name: ignored, it would
// give a reply that looks like an answer to the request and is not.
struct Unimplemented {
  const char* name;
  const char* asks_for;  // what a caller sending it wants, for the message
  const char* no_op;     // the accepted value as JSON text; null: none is
};
constexpr Unimplemented kUnimplemented[] = {
    {"response_format", "structured output (JSON mode or a JSON schema)", R"({"type":"text"})"},
    {"tools", "tool calls", "[]"},
    {"tool_choice", "tool calls", R"("none")"},
    {"functions", "function calls", "[]"},
    {"function_call", "function calls", R"("none")"},
    {"suffix", "insertion (text after the completion)", R"("")"},
    {"audio", "audio output", nullptr},
    {"modalities", "output other than text", R"(["text"])"},
    {"min_p", "min-p sampling", "0"},
    {"typical_p", "typical sampling", "1"},
    {"repetition_penalty",
     "a repetition penalty (presence_penalty and frequency_penalty are implemented)", "1"},
    {"repeat_penalty",
     "a repetition penalty (presence_penalty and frequency_penalty are implemented)", "1"},
    {"mirostat", "mirostat sampling", "0"},
    {"ignore_eos", "generation past the end-of-sequence token", "false"},
    {"min_tokens", "a minimum number of generated tokens", "0"},
    {"grammar", "output constrained by a grammar", nullptr},
    {"json_schema", "output constrained by a JSON schema", nullptr},
    {"guided_json", "output constrained by a JSON schema", nullptr},
    {"guided_regex", "output constrained by a regular expression", nullptr},
    {"guided_choice", "output constrained to a list of choices", nullptr},
    {"guided_grammar", "output constrained by a grammar", nullptr},
    {"structured_outputs", "constrained output", nullptr},
};

void refuse_unimplemented(const json& j) {
  for (const Unimplemented& u : kUnimplemented) {
    const json* v = field(j, u.name);
    if (v == nullptr) continue;
    // Numbers compare by value (1 and 1.0 are the same request).
    const json accepted = u.no_op != nullptr ? json::parse(u.no_op) : json();
    const bool no_op =
        u.no_op != nullptr && (*v == accepted || (v->is_number() && accepted.is_number() &&
                                                  v->get<double>() == accepted.get<double>()));
    if (no_op) continue;
    throw invalid_request(std::string(u.name) + " asks for " + u.asks_for +
                              ", which this server does not implement" +
                              (u.no_op != nullptr ? std::string("; leave it out or send ") + u.no_op
                                                  : std::string("; leave it out")),
                          u.name);
  }
}

SamplingRequest decode_sampling(const json& j, const RequestLimits& lim, bool chat,
                                int64_t vocab_size) {
  SamplingRequest s;
  // max_completion_tokens is the chat API's newer name; it wins when both are given, as OpenAI's.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(name) == "max_completion_tokens") continue;
    if (const json* v = field(j, name)) s.max_tokens = get_int(*v, name, chat ? 1 : 0, lim.max_tokens);
  }
  if (const json* v = field(j, "temperature")) s.temperature = get_number(*v, "temperature", 0, 2);
  if (const json* v = field(j, "top_p")) s.top_p = get_number(*v, "top_p", 0, 1);
  if (const json* v = field(j, "top_k")) s.top_k = get_int(*v, "top_k", 0, std::numeric_limits<int32_t>::max());
  if (const json* v = field(j, "presence_penalty"))
    s.presence_penalty = get_number(*v, "presence_penalty", -2, 2);
  if (const json* v = field(j, "frequency_penalty"))
    s.frequency_penalty = get_number(*v, "frequency_penalty", -2, 2);
  if (const json* v = field(j, "logit_bias")) s.logit_bias = decode_logit_bias(*v, vocab_size);
  if (const json* v = field(j, "seed"))
    s.seed = static_cast<uint64_t>(get_int(*v, "seed", std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()));
  if (const json* v = field(j, "n")) s.n = get_int(*v, "n", 1, lim.max_n);
  // best_of draws that many and returns the n most likely: the same as n choices only when equal.
  if (const json* v = field(j, "best_of");
      v != nullptr && get_int(*v, "best_of", 1, lim.max_n) != s.n)
    throw invalid_request(
        "best_of other than n asks for the most likely of several samples, which this server does "
        "not implement; leave it out or send best_of equal to n",
        "best_of");
  if (const json* v = field(j, "stream")) s.stream = get_bool(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) throw invalid_request(std::string("stream_options must be an object, got ") + type_name(*v), "stream_options");
    if (!s.stream) throw invalid_request("stream_options is only allowed when stream is true", "stream_options");
    if (const json* u = field(*v, "include_usage")) s.include_usage = get_bool(*u, "stream_options.include_usage");
  }
  if (const json* v = field(j, "stop")) {
    std::vector<json> items;
    if (v->is_string())
      items.push_back(*v);
    else if (v->is_array())
      items.assign(v->begin(), v->end());
    else
      throw invalid_request(std::string("stop must be a string or an array of strings, got ") + type_name(*v), "stop");
    if (static_cast<int64_t>(items.size()) > lim.max_stop)
      throw invalid_request("stop has " + std::to_string(items.size()) + " strings; at most " +
                                std::to_string(lim.max_stop) + " are allowed",
                            "stop");
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string p = "stop[" + std::to_string(i) + "]";
      std::string text = get_string(items[i], p);
      if (text.empty()) throw invalid_request(p + " is empty", p);
      if (static_cast<int64_t>(text.size()) > lim.max_stop_bytes)
        throw invalid_request(p + " is " + std::to_string(text.size()) + " bytes; at most " +
                                  std::to_string(lim.max_stop_bytes) + " are allowed",
                              p);
      s.stop.push_back(std::move(text));
    }
  }
  return s;
}

std::string decode_model(const json& j) {
  const json* v = field(j, "model");
  if (v == nullptr) throw invalid_request("model is required (GET /v1/models lists the names)", "model");
  return get_string(*v, "model");
}

// OpenAI content: a string, or an array of parts of which only {"type": "text", "text": ...} is
// something a text model can read.
std::string decode_content(const json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw invalid_request(param + " must be a string or an array of text parts, got " + type_name(v), param);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = v[i];
    if (!part.is_object()) throw invalid_request(p + " must be an object, got " + type_name(part), p);
    const json* type = field(part, "type");
    if (type == nullptr || get_string(*type, p + ".type") != "text")
      throw invalid_request(p + ": only parts of type \"text\" are supported by a text model", p + ".type");
    const json* t = field(part, "text");
    if (t == nullptr) throw invalid_request(p + ".text is required", p + ".text");
    text += get_string(*t, p + ".text");
  }
  return text;
}

std::vector<int32_t> decode_token_ids(const json& arr, const std::string& param, int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i)
    ids.push_back(static_cast<int32_t>(get_int(arr[i], param + "[" + std::to_string(i) + "]", 0, vocab_size - 1)));
  return ids;
}

}  // namespace

ChatRequest decode_chat_request(std::string_view body, const RequestLimits& limits,
                                int64_t vocab_size) {
  const json j = parse_object(body);
  ChatRequest r;
  r.model = decode_model(j);
  const json* msgs = field(j, "messages");
  if (msgs == nullptr) throw invalid_request("messages is required", "messages");
  if (!msgs->is_array()) throw invalid_request(std::string("messages must be an array, got ") + type_name(*msgs), "messages");
  if (msgs->empty()) throw invalid_request("messages is empty", "messages");
  if (static_cast<int64_t>(msgs->size()) > limits.max_messages)
    throw invalid_request("messages has " + std::to_string(msgs->size()) + " entries; at most " +
                              std::to_string(limits.max_messages) + " are allowed",
                          "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*msgs)[i];
    if (!m.is_object()) throw invalid_request(p + " must be an object, got " + type_name(m), p);
    const json* role = field(m, "role");
    if (role == nullptr) throw invalid_request(p + ".role is required", p + ".role");
    ChatMessageRequest msg;
    msg.role = get_string(*role, p + ".role");
    // "developer" is OpenAI's newer name for the system message.
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      throw invalid_request(p + ".role must be system, developer, user or assistant, got \"" + msg.role + "\"",
                            p + ".role");
    const json* content = field(m, "content");
    if (content == nullptr) throw invalid_request(p + ".content is required", p + ".content");
    msg.content = decode_content(*content, p + ".content");
    r.messages.push_back(std::move(msg));
  }
  r.sampling = decode_sampling(j, limits, /*chat=*/true, vocab_size);
  refuse_unimplemented(j);
  if (const json* v = field(j, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
  if (const json* v = field(j, "top_logprobs")) {
    r.top_logprobs = get_int(*v, "top_logprobs", 0, limits.max_top_logprobs);
    if (!r.logprobs) throw invalid_request("top_logprobs needs logprobs: true", "top_logprobs");
  }
  return r;
}

CompletionRequest decode_completion_request(std::string_view body, const RequestLimits& limits,
                                            int64_t vocab_size) {
  const json j = parse_object(body);
  CompletionRequest r;
  r.model = decode_model(j);
  const json* p = field(j, "prompt");
  if (p == nullptr) throw invalid_request("prompt is required", "prompt");
  auto too_many = [&](size_t n) {
    if (static_cast<int64_t>(n) > limits.max_prompts)
      throw invalid_request("prompt holds " + std::to_string(n) + " prompts; at most " +
                                std::to_string(limits.max_prompts) + " are allowed per request",
                            "prompt");
  };
  if (p->is_string()) {
    r.prompts.push_back(p->get<std::string>());
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompt_ids.push_back(decode_token_ids(*p, "prompt", vocab_size));
  } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
    too_many(p->size());
    for (size_t i = 0; i < p->size(); ++i) {
      const std::string name = "prompt[" + std::to_string(i) + "]";
      if (!(*p)[i].is_array()) throw invalid_request(name + " must be an array of token ids, got " + type_name((*p)[i]), name);
      r.prompt_ids.push_back(decode_token_ids((*p)[i], name, vocab_size));
    }
  } else if (p->is_array() && !p->empty()) {
    too_many(p->size());
    for (size_t i = 0; i < p->size(); ++i) r.prompts.push_back(get_string((*p)[i], "prompt[" + std::to_string(i) + "]"));
  } else {
    throw invalid_request(std::string("prompt must be a string, an array of strings, an array of token ids or an "
                                      "array of such arrays, and not empty; got ") +
                              (p->is_array() ? "an empty array" : type_name(*p)),
                          "prompt");
  }
  for (size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i].empty())
      throw invalid_request("prompt[" + std::to_string(i) + "] has no tokens", "prompt");
  r.sampling = decode_sampling(j, limits, /*chat=*/false, vocab_size);
  refuse_unimplemented(j);
  if (const json* v = field(j, "echo")) r.echo = get_bool(*v, "echo");
  if (const json* v = field(j, "logprobs")) {
    // The legacy API's logprobs is a count; true/false (the chat form) is accepted as 1/none.
    if (v->is_boolean()) {
      if (v->get<bool>()) r.logprobs = 1;
    } else {
      r.logprobs = get_int(*v, "logprobs", 0, limits.max_top_logprobs);
    }
  }
  if (r.sampling.max_tokens && *r.sampling.max_tokens == 0 && !r.echo)
    throw invalid_request("max_tokens 0 returns nothing unless echo is true", "max_tokens");
  return r;
}

}  // namespace medtune::serve
