#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace medtune::tokenizer {

ChatTemplate::ChatTemplate(std::string source, std::string origin)
    : source_(std::move(source)), origin_(std::move(origin)) {
  const std::string normalized = jinja::normalize_template_source(source_);
  body_ = jinja::parse_template(jinja::lex_template(normalized, origin_), origin_);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token) const {
  jinja::List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    // Key order matters: a template that prints a message or passes it to tojson shows it.
    jinja::Dict d;
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    list.emplace_back(std::move(d));
  }
  jinja::Dict context;
  context.set("messages", jinja::Value(std::move(list)));
  // transformers passes tools=None and documents=None explicitly, so `tools is defined` holds.
  context.set("tools", jinja::Value::none());
  context.set("documents", jinja::Value::none());
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.set("bos_token", jinja::Value(bos_token));
  context.set("eos_token", jinja::Value(eos_token));
  return jinja::render_template(body_, context, origin_);
}

}  // namespace medtune::tokenizer
