#include "eval/prompt.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "core/input_file.h"
#include "eval/python_random.h"

namespace medtune::eval {

PromptFormat parse_prompt_format(const std::string& name) {
  if (name == "lm_eval") return PromptFormat::lm_eval;
  if (name == "chat") return PromptFormat::chat;
  if (name == "custom") return PromptFormat::custom;
  throw BadInput("unknown prompt format '" + name + "' (valid: lm_eval, chat, custom)");
}

const char* prompt_format_name(PromptFormat f) {
  switch (f) {
    case PromptFormat::lm_eval: return "lm_eval";
    case PromptFormat::chat: return "chat";
    case PromptFormat::custom: return "custom";
  }
  return "?";
}

namespace {

std::string read_text_file(const std::string& path) {
  require_input_file(path, "prompt template");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open the prompt template");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Replaces every "{name}" in `text`; an unknown "{...}" is an error naming it, so a typo in a
// template is not silently left in every prompt.
std::string substitute(const std::string& text, const std::string& origin,
                       const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '{') {
      const size_t close = text.find('}', i);
      if (close == std::string::npos) throw BadInput(origin + ": unclosed '{' at byte " + std::to_string(i));
      const std::string key = text.substr(i + 1, close - i - 1);
      bool found = false;
      for (const auto& [k, v] : values)
        if (k == key) {
          out += v;
          found = true;
          break;
        }
      if (!found)
        throw BadInput(origin + ": unknown placeholder '{" + key +
                       "}' (valid: {question}, {options}, {A}, {B}, ...)");
      i = close + 1;
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

PromptRenderer::PromptRenderer(PromptOptions options, const tokenizer::Tokenizer& tok,
                               std::optional<tokenizer::ChatTemplate> chat_template)
    : opt_(std::move(options)), tok_(tok), chat_(std::move(chat_template)) {
  if (opt_.format == PromptFormat::chat && !chat_)
    throw BadInput("prompt format 'chat' needs the model's chat template, and it has none");
  if (opt_.format == PromptFormat::chat && opt_.fewshot_k > 0)
    throw BadInput("few-shot examples are not supported with the chat prompt format");
  if (opt_.task && (opt_.format != PromptFormat::lm_eval || opt_.fewshot_k > 0))
    throw BadInput("task " + opt_.task->name + " is scored zero-shot with its own lm-eval prompt: no --format, no --fewshot");
  if (opt_.format == PromptFormat::custom) {
    if (opt_.custom_template_path.empty()) throw BadInput("prompt format 'custom' needs --prompt-template FILE");
    custom_template_ = read_text_file(opt_.custom_template_path);
    // Without the question (or the options) every item would be scored on the same prompt and the
    // "accuracy" would measure nothing about the questions.
    if (custom_template_.find("{question}") == std::string::npos)
      throw BadInput(opt_.custom_template_path + ": the prompt template has no {question} placeholder");
    if (custom_template_.find("{options}") == std::string::npos && custom_template_.find("{A}") == std::string::npos)
      throw BadInput(opt_.custom_template_path + ": the prompt template shows no options (neither {options} nor {A}, {B}, ...)");
  }
  if (opt_.fewshot_k > 0) {
    if (opt_.fewshot_pool.empty()) throw BadInput("--fewshot needs a pool file (--fewshot-pool)");
    fewshot_pool_ = read_mcq_jsonl(opt_.fewshot_pool, false).items;
    if (static_cast<int64_t>(fewshot_pool_.size()) < opt_.fewshot_k)
      throw BadInput(opt_.fewshot_pool + ": " + std::to_string(fewshot_pool_.size()) +
                     " questions, fewer than the " + std::to_string(opt_.fewshot_k) + " few-shot examples asked for");
  }
}

namespace {

// lm-eval compares documents as dicts: every field of the record.
bool same_record(const McqItem& a, const McqItem& b) {
  return a.question == b.question && a.options == b.options && a.answer == b.answer && a.meta_info == b.meta_info &&
         a.passage == b.passage;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

}  // namespace

std::vector<std::vector<size_t>> fewshot_draws(const std::vector<McqItem>& pool,
                                               const std::vector<McqItem>& questions, int k,
                                               uint64_t seed, bool pool_is_question_file) {
  std::vector<std::vector<size_t>> out;
  if (k <= 0) return out;
  const size_t n = static_cast<size_t>(k);
  PythonRandom rnd(seed);
  out.reserve(questions.size());
  for (const McqItem& q : questions) {
    if (!pool_is_question_file) {
      out.push_back(rnd.sample(pool.size(), n));
      continue;
    }
    std::vector<size_t> kept;
    for (size_t i : rnd.sample(pool.size(), n + 1))
      if (!same_record(pool[i], q) && kept.size() < n) kept.push_back(i);
    if (kept.size() < n)  // lm-eval asserts here: the question was drawn twice (duplicate records)
      throw BadInput(q.id + ": fewer than " + std::to_string(n) +
                     " few-shot examples left after removing the question itself (duplicate records in the pool?)");
    out.push_back(std::move(kept));
  }
  return out;
}

void PromptRenderer::draw_fewshot(const McqSet& questions) {
  fewshot_prefix_.clear();
  if (opt_.fewshot_k <= 0) return;
  const auto draws = fewshot_draws(fewshot_pool_, questions.items, opt_.fewshot_k, opt_.fewshot_seed,
                                   same_file(opt_.fewshot_pool, questions.path));
  for (size_t q = 0; q < questions.items.size(); ++q) {
    std::string prefix;
    for (size_t i : draws[q]) {
      const McqItem& ex = fewshot_pool_[i];
      prefix += context_text(ex) + " " + option_letter(ex.answer) + "\n\n";
    }
    fewshot_prefix_[questions.items[q].id] = std::move(prefix);
  }
}

std::string PromptRenderer::question_body(const McqItem& item) const {
  std::string s = item.question;
  for (size_t i = 0; i < item.options.size(); ++i)
    s += "\n" + option_letter(static_cast<int>(i)) + ". " + item.options[i];
  return s;
}

std::string PromptRenderer::context_text(const McqItem& item) const {
  if (opt_.task) return task_prompt(*opt_.task, item);
  switch (opt_.format) {
    case PromptFormat::lm_eval:
      return "Question: " + question_body(item) + "\nAnswer:";
    case PromptFormat::chat: {
      std::vector<tokenizer::ChatMessage> messages;
      if (!opt_.system_prompt.empty()) messages.push_back({"system", opt_.system_prompt});
      messages.push_back({"user", question_body(item) + "\nAnswer with the letter of the single best option."});
      const std::string bos = tok_.bos_id() >= 0 ? tok_.token_piece(tok_.bos_id()) : "";
      const std::string eos = tok_.eos_id() >= 0 ? tok_.token_piece(tok_.eos_id()) : "";
      return chat_->apply(messages, true, bos, eos);
    }
    case PromptFormat::custom: {
      std::vector<std::pair<std::string, std::string>> values{{"question", item.question}};
      std::string options;
      for (size_t i = 0; i < item.options.size(); ++i) {
        options += (i ? "\n" : "") + option_letter(static_cast<int>(i)) + ". " + item.options[i];
        values.emplace_back(option_letter(static_cast<int>(i)), item.options[i]);
      }
      values.emplace_back("options", options);
      return substitute(custom_template_, opt_.custom_template_path, values);
    }
  }
  return {};
}

RenderedQuestion PromptRenderer::render(const McqItem& item) const {
  RenderedQuestion r;
  if (opt_.fewshot_k > 0) {
    const auto it = fewshot_prefix_.find(item.id);
    if (it == fewshot_prefix_.end())
      throw Internal("few-shot examples were not drawn for question " + item.id + " (draw_fewshot)");
    r.context = it->second;
  }
  r.context += context_text(item);
  // In the chat format the letter is the assistant's first token, with no leading space.
  const std::string sep = opt_.format == PromptFormat::chat ? "" : " ";
  for (size_t i = 0; i < item.options.size(); ++i) {
    r.letter_continuations.push_back(sep + option_letter(static_cast<int>(i)));
    r.text_continuations.push_back(sep + item.options[i]);
  }
  return r;
}

std::vector<int32_t> PromptRenderer::continuation(const std::string& context,
                                                  const std::string& cont) const {
  // lm-eval's _encode_pair: encode the whole, keep what follows the context's tokens. Chat
  // prompts carry their special tokens in the text, so the post-processor adds nothing there.
  const bool special = opt_.format != PromptFormat::chat;
  const auto whole = tok_.encode(context + cont, special);
  const auto ctx = tok_.encode(context, special);
  if (whole.size() <= ctx.size() || !std::equal(ctx.begin(), ctx.end() - 1, whole.begin()))
    // The context's last token merged with the continuation: score the continuation on its own.
    return tok_.encode(cont, false);
  return std::vector<int32_t>(whole.begin() + static_cast<std::ptrdiff_t>(ctx.size()), whole.end());
}

TokenizedQuestion PromptRenderer::tokenize(const McqItem& item, bool with_option_text) const {
  const RenderedQuestion r = render(item);
  TokenizedQuestion t;
  t.context = tok_.encode(r.context, opt_.format != PromptFormat::chat);
  for (const auto& c : r.letter_continuations) t.letter_tokens.push_back(continuation(r.context, c));
  if (with_option_text)
    for (const auto& c : r.text_continuations) t.text_tokens.push_back(continuation(r.context, c));
  return t;
}

void PromptRenderer::training_example(const McqItem& item, std::vector<int32_t>& context,
                                      std::vector<int32_t>& answer, bool option_text) const {
  const RenderedQuestion r = render(item);
  context = tok_.encode(r.context, opt_.format != PromptFormat::chat);
  const auto& targets = option_text ? r.text_continuations : r.letter_continuations;
  answer = continuation(r.context, targets[static_cast<size_t>(item.answer)]);
}

}  // namespace medtune::eval
