#include "serve/service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/utf8.h"

namespace medtune::serve {

using nlohmann::json;

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = digits[rng() & 15];
  return s;
}

std::string finish_name(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

// Invalid UTF-8 (a token that is part of a character) must not reach JSON: nlohmann throws on
// it when serializing. Replaced as the decoder does elsewhere.
json text_json(const std::string& s) { return tokenizer::sanitize_utf8(s); }

}  // namespace

struct Service::Choice {
  std::string text;
  std::string finish_reason = "length";
  int64_t completion_tokens = 0;
  std::vector<TokenLogprob> tokens;  // generated, when logprobs were asked for
  std::vector<TokenLogprob> prompt;  // prompt[1..P), with echo and logprobs
};

Service::Service(const tokenizer::Tokenizer& tok, const tokenizer::ChatTemplate* chat_template, Engine& engine,
                 AdapterRegistry& adapters, Metrics& metrics, BaseModelInfo base, RequestLimits limits)
    : tok_(tok), template_(chat_template), engine_(engine), adapters_(adapters), metrics_(metrics),
      base_(std::move(base)), limits_(limits) {}

void Service::set_stop_ids(std::vector<int64_t> ids) { stop_ids_ = std::move(ids); }
void Service::set_request_timeout(double seconds) { timeout_seconds_ = seconds; }

std::shared_ptr<const Adapter> Service::resolve_model(const std::string& name) const {
  if (name == base_.name) return nullptr;
  auto a = adapters_.find(name);
  if (!a)
    throw ApiError(404, "invalid_request_error",
                   "The model '" + name + "' does not exist; GET /v1/models lists the base and the adapters", "model",
                   "model_not_found");
  return a;
}

void Service::finish_prepare(PreparedRequest& out, const std::string& param) const {
  out.created = unix_now();
  out.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_seconds_));
  out.seed = out.sampling.seed ? *out.sampling.seed : std::random_device{}();
  const int64_t ctx = engine_.slot_size();
  int64_t longest = 0;
  for (const auto& p : out.prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const int64_t min_new = out.sampling.max_tokens ? *out.sampling.max_tokens : 1;
  if (longest + min_new > ctx)
    throw invalid_request("This model's maximum context length is " + std::to_string(ctx) +
                              " tokens (--ctx-size / --parallel). However, you requested " + std::to_string(longest + min_new) +
                              " tokens (" + std::to_string(longest) + " in the prompt, " + std::to_string(min_new) +
                              " for the completion). Please reduce the length of the " + param + " or max_tokens.",
                          param);
  // No max_tokens: until the context is full, as llama-server does.
  out.max_tokens = out.sampling.max_tokens ? *out.sampling.max_tokens : ctx - longest;
}

PreparedRequest Service::prepare(const ChatRequest& r) const {
  PreparedRequest out;
  out.chat = true;
  out.id = "chatcmpl-" + random_hex(24);
  out.model = r.model;
  out.adapter = resolve_model(r.model);
  out.sampling = r.sampling;
  out.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  if (template_ == nullptr)
    throw invalid_request("the model has no chat template: use /v1/completions with a prompt", "messages");
  std::vector<tokenizer::ChatMessage> messages;
  for (const auto& m : r.messages) messages.push_back({m.role, m.content});
  const std::string bos = tok_.bos_id() >= 0 ? tok_.token_piece(tok_.bos_id()) : "";
  const std::string eos = tok_.eos_id() >= 0 ? tok_.token_piece(tok_.eos_id()) : "";
  std::string text;
  try {
    text = template_->apply(messages, /*add_generation_prompt=*/true, bos, eos);
  } catch (const BadInput& e) {
    // The template's own raise_exception (e.g. "roles must alternate") is about the messages.
    throw invalid_request(std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
  // The template writes BOS itself where the model wants one: no post-processor tokens.
  out.prompts.push_back(tok_.encode(text, false));
  finish_prepare(out, "messages");
  return out;
}

PreparedRequest Service::prepare(const CompletionRequest& r) const {
  PreparedRequest out;
  out.id = "cmpl-" + random_hex(24);
  out.model = r.model;
  out.adapter = resolve_model(r.model);
  out.sampling = r.sampling;
  out.echo = r.echo;
  out.top_logprobs = r.logprobs ? *r.logprobs : -1;
  if (r.sampling.stream && r.echo && r.logprobs)
    throw invalid_request("echo with logprobs is not supported with stream: true", "echo");
  for (const auto& text : r.prompts) {
    auto ids = tok_.encode(text, true);
    if (ids.empty()) throw invalid_request("a prompt has no tokens (an empty string)", "prompt");
    out.prompts.push_back(std::move(ids));
  }
  for (const auto& ids : r.prompt_ids) out.prompts.push_back(ids);
  finish_prepare(out, "prompt");
  return out;
}

std::string Service::piece(int32_t id) const { return tok_.decode({id}, /*skip_special=*/false); }

std::shared_ptr<Job> Service::start_choice(const PreparedRequest& p, size_t prompt_index, int64_t index) const {
  JobSpec spec;
  spec.adapter = p.adapter;
  spec.prompt = p.prompts[prompt_index];
  spec.max_tokens = p.max_tokens;
  spec.sampling.temperature = p.sampling.temperature;
  spec.sampling.top_p = p.sampling.top_p;
  spec.sampling.top_k = p.sampling.top_k;
  spec.sampling.presence_penalty = p.sampling.presence_penalty;
  spec.sampling.frequency_penalty = p.sampling.frequency_penalty;
  spec.sampling.logit_bias = p.sampling.logit_bias;
  spec.sampling.seed = p.seed + static_cast<uint64_t>(index);
  spec.stop_ids = stop_ids_;
  spec.top_logprobs = p.top_logprobs;
  spec.prompt_logprobs = p.echo && p.top_logprobs >= 0;
  spec.deadline = p.deadline;
  auto job = std::make_shared<Job>(std::move(spec));
  engine_.submit(job);
  return job;
}

Service::Choice Service::collect_choice(
    const PreparedRequest& p, size_t prompt_index, Job& job,
    const std::function<bool(const std::string&, const TokenLogprob*)>& on_delta) const {
  Choice c;
  tokenizer::TextStream text(tok_, p.sampling.stop);
  bool cancelled = false;
  Job::Event ev;
  while (job.next(ev)) {
    if (ev.kind == Job::Event::kPrompt) {
      c.prompt = std::move(ev.prompt);
    } else if (ev.kind == Job::Event::kToken) {
      if (cancelled) continue;  // tokens computed before the engine saw the cancel
      ++c.completion_tokens;
      if (c.completion_tokens == 1) metrics_.time_to_first_token(job.first_token_seconds);
      const std::string delta = text.push(ev.token.id);
      const TokenLogprob* lp = nullptr;
      if (p.top_logprobs >= 0) {
        c.tokens.push_back(ev.token);
        lp = &c.tokens.back();
      }
      c.text += delta;
      if (text.stopped()) c.finish_reason = "stop";
      if ((!delta.empty() || lp) && !on_delta(delta, lp)) {
        job.cancel();
        cancelled = true;
        c.finish_reason = "cancelled";
      }
      if (text.stopped() && !cancelled) {
        job.cancel();
        cancelled = true;
      }
    } else {  // kEnd
      if (ev.finish == FinishReason::kError) {
        std::fprintf(stderr, "medtune serve: engine error in %s: %s\n", p.id.c_str(), ev.error.c_str());
        throw ApiError(500, "server_error", "the model failed on this request (logged on the server as " + p.id + ")");
      }
      if (!cancelled) c.finish_reason = finish_name(ev.finish);
    }
  }
  if (!cancelled) {
    const std::string tail = text.finish();
    if (text.stopped()) c.finish_reason = "stop";
    if (!tail.empty()) {
      c.text += tail;
      on_delta(tail, nullptr);
    }
  }
  metrics_.tokens(static_cast<int64_t>(p.prompts[prompt_index].size()), c.completion_tokens);
  return c;
}

json Service::chat_logprob_entry(const TokenLogprob& t) const {
  auto entry = [&](int32_t id, float lp) {
    const std::string s = piece(id);
    json bytes = json::array();
    for (unsigned char ch : s) bytes.push_back(static_cast<int>(ch));
    return json{{"token", text_json(s)}, {"logprob", lp}, {"bytes", bytes}};
  };
  json e = entry(t.id, t.logprob);
  e["top_logprobs"] = json::array();
  for (const auto& [id, lp] : t.top) e["top_logprobs"].push_back(entry(id, lp));
  return e;
}

// The legacy completions shape: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; with
// echo the prompt's tokens come first, the first of them with null (nothing precedes it).
json Service::completion_logprobs(const Choice& c, const std::vector<int32_t>& prompt) const {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  auto add = [&](int32_t id, const TokenLogprob* t) {
    const std::string s = piece(id);
    tokens.push_back(text_json(s));
    offsets.push_back(offset);
    offset += s.size();
    if (t == nullptr) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    lps.push_back(t->logprob);
    json top = json::object();
    for (const auto& [tid, lp] : t->top) top[text_json(piece(tid)).get<std::string>()] = lp;
    tops.push_back(top);
  };
  if (!prompt.empty()) {
    if (c.prompt.size() + 1 != prompt.size()) throw Internal("echo: prompt log-probs do not match the prompt");
    add(prompt[0], nullptr);
    for (size_t i = 0; i < c.prompt.size(); ++i) add(prompt[i + 1], &c.prompt[i]);
  }
  for (const auto& t : c.tokens) add(t.id, &t);
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json Service::provenance(const PreparedRequest& p) const {
  json j = {{"model", base_.name}, {"model_sha256", base_.sha256}};
  if (p.adapter) {
    j["adapter"] = p.adapter->name;
    j["adapter_sha256"] = p.adapter->adapter_sha256;
    j["run_manifest_inputs_sha256"] =
        p.adapter->manifest_sha256.empty() ? json(nullptr) : json(p.adapter->manifest_sha256);
  }
  return j;
}

std::string Service::fingerprint(const PreparedRequest& p) const {
  if (!p.adapter) return "base:" + base_.sha256.substr(0, 16);
  if (!p.adapter->manifest_sha256.empty()) return "run:" + p.adapter->manifest_sha256;
  return "adapter:" + p.adapter->adapter_sha256;
}

void Service::for_each_choice(const PreparedRequest& p, const std::function<bool(size_t, int64_t, Job&)>& each) const {
  const int64_t n = p.sampling.n, total = static_cast<int64_t>(p.prompts.size()) * n;
  const int64_t window = std::max<int64_t>(1, engine_.parallel());
  std::deque<std::shared_ptr<Job>> ahead;  // submitted, in index order
  int64_t next = 0;                        // the first choice not yet submitted
  struct CancelAhead {  // however this ends (done, stopped, thrown), no job is left running for nobody
    std::deque<std::shared_ptr<Job>>& jobs;
    ~CancelAhead() {
      for (auto& j : jobs) j->cancel();
    }
  } cancel_ahead{ahead};
  for (int64_t k = 0; k < total; ++k) {
    while (next < total && static_cast<int64_t>(ahead.size()) < window) {
      try {
        ahead.push_back(start_choice(p, static_cast<size_t>(next / n), next % n));
        ++next;
      } catch (const ApiError& e) {
        // The queue is full: go on with the jobs already in it, and submit the rest as they end.
        if (e.status() != 503 || ahead.empty()) throw;
        break;
      }
    }
    const std::shared_ptr<Job> job = std::move(ahead.front());
    ahead.pop_front();
    if (!each(static_cast<size_t>(k / n), k % n, *job)) return;
  }
}

json Service::run(const PreparedRequest& p, const std::function<bool()>& alive) const {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const auto& prompt : p.prompts) prompt_tokens += static_cast<int64_t>(prompt.size());
  for_each_choice(p, [&](size_t pi, int64_t i, Job& job) {
    const int64_t index = static_cast<int64_t>(pi) * p.sampling.n + i;
    Choice c = collect_choice(p, pi, job, [&](const std::string&, const TokenLogprob*) { return alive(); });
    completion_tokens += c.completion_tokens;
    if (c.finish_reason == "cancelled") throw ApiError(499, "client_closed_request", "the client closed the connection");
    json choice = {{"index", index}, {"finish_reason", c.finish_reason}};
    if (p.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text_json(c.text)}};
      choice["logprobs"] = nullptr;
      if (p.top_logprobs >= 0) {
        json content = json::array();
        for (const auto& t : c.tokens) content.push_back(chat_logprob_entry(t));
        choice["logprobs"] = {{"content", content}};
      }
    } else {
      const std::string prefix = p.echo ? tok_.decode(p.prompts[pi], /*skip_special=*/false) : "";
      choice["text"] = text_json(prefix + c.text);
      choice["logprobs"] = p.top_logprobs >= 0 ? completion_logprobs(c, p.echo ? p.prompts[pi] : std::vector<int32_t>{})
                                               : json(nullptr);
    }
    choices.push_back(std::move(choice));
    return true;
  });
  return {{"id", p.id},
          {"object", p.chat ? "chat.completion" : "text_completion"},
          {"created", p.created},
          {"model", p.model},
          {"system_fingerprint", fingerprint(p)},
          {"choices", choices},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}},
          {"provenance", provenance(p)}};
}

void Service::stream(const PreparedRequest& p, const std::function<bool(std::string_view)>& write) const {
  auto chunk = [&](json choices) {
    return json{{"id", p.id},
                {"object", p.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", p.created},
                {"model", p.model},
                {"system_fingerprint", fingerprint(p)},
                {"choices", std::move(choices)}};
  };
  auto send = [&](const json& j) {
    return write("data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
  };
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const auto& prompt : p.prompts) prompt_tokens += static_cast<int64_t>(prompt.size());
  try {
    // Choices are sent one after another, each whole; the ones after it already run in the engine.
    bool gone = false;  // the client left: stop reading choices and write nothing more
    const auto client_gone = [&gone] {
      gone = true;
      return false;
    };
    for_each_choice(p, [&](size_t pi, int64_t i, Job& job) {
      const int64_t index = static_cast<int64_t>(pi) * p.sampling.n + i;
      if (p.chat) {
        // The first chunk of a choice carries the role, as OpenAI's.
        json delta = {{"role", "assistant"}, {"content", ""}};
        if (!send(chunk(json::array({{{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}))))
          return client_gone();
      } else if (p.echo) {
        json c = {{"index", index}, {"text", text_json(tok_.decode(p.prompts[pi], false))}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        if (!send(chunk(json::array({c})))) return client_gone();
      }
      Choice c = collect_choice(p, pi, job, [&](const std::string& delta, const TokenLogprob* lp) {
        json choice = {{"index", index}, {"finish_reason", nullptr}};
        if (p.chat) {
          choice["delta"] = {{"content", text_json(delta)}};
          choice["logprobs"] = lp ? json{{"content", json::array({chat_logprob_entry(*lp)})}} : json(nullptr);
        } else {
          choice["text"] = text_json(delta);
          choice["logprobs"] = nullptr;
          if (lp) {
            Choice one;
            one.tokens.push_back(*lp);
            choice["logprobs"] = completion_logprobs(one, {});
          }
        }
        return send(chunk(json::array({choice})));
      });
      completion_tokens += c.completion_tokens;
      if (c.finish_reason == "cancelled") return client_gone();
      json last = {{"index", index}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
      if (p.chat) last["delta"] = json::object();
      else last["text"] = "";
      return send(chunk(json::array({last}))) || client_gone();
    });
    if (gone) return;
  } catch (const ApiError& e) {
    send(e.body());
    write("data: [DONE]\n\n");
    return;
  }
  if (p.sampling.include_usage) {
    json u = chunk(json::array());
    u["usage"] = {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens + completion_tokens}};
    u["provenance"] = provenance(p);
    if (!send(u)) return;
  }
  write("data: [DONE]\n\n");
}

json Service::models() const {
  json data = json::array();
  data.push_back({{"id", base_.name}, {"object", "model"}, {"created", base_.created}, {"owned_by", "medtune"},
                  {"provenance", {{"model_sha256", base_.sha256}}}});
  for (const auto& a : adapters_.list())
    data.push_back({{"id", a->name},
                    {"object", "model"},
                    {"created", a->created},
                    {"owned_by", "medtune"},
                    {"parent", base_.name},
                    {"provenance",
                     {{"adapter_sha256", a->adapter_sha256},
                      {"run_manifest_inputs_sha256", a->manifest_sha256.empty() ? json(nullptr) : json(a->manifest_sha256)}}}});
  return {{"object", "list"}, {"data", data}};
}

json Service::tokenizer_info() const {
  json j = {{"eos_token", tok_.eos_id() >= 0 ? json(tok_.token_piece(tok_.eos_id())) : json(nullptr)},
            {"bos_token", tok_.bos_id() >= 0 ? json(tok_.token_piece(tok_.bos_id())) : json(nullptr)},
            {"pad_token", nullptr},
            {"model_max_length", engine_.slot_size()}};
  j["chat_template"] = template_ ? json(template_->source()) : json(nullptr);
  return j;
}

std::vector<int32_t> Service::tokenize(const std::string& text, bool add_special) const {
  return tok_.encode(text, add_special);
}

std::string Service::detokenize(const std::vector<int32_t>& ids) const { return tok_.decode(ids, false); }

}  // namespace medtune::serve
