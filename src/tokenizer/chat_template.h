// Chat templates: the Jinja programs shipped with instruct models (tokenizer_config.json's
// chat_template, GGUF's tokenizer.chat_template) that turn a conversation into prompt text.
// Rendering matches transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) byte for byte, through a built-in interpreter for the subset of
// Jinja these templates use (docs/chat_templates.md lists it).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace medtune::tokenizer {

struct ChatMessage {
  std::string role;
  std::string content;
};

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  // Parses `source` once; a syntax error or a construct outside the supported subset throws
  // medtune::BadInput "<origin>:<line>:<column>: <what>". `origin` names where the template came
  // from, e.g. "model.gguf: tokenizer.chat_template".
  explicit ChatTemplate(std::string source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The template sees what transformers passes: messages (a list of {role, content}),
  // add_generation_prompt, bos_token, eos_token, tools and documents (both none), plus the
  // globals raise_exception, strftime_now, range, namespace and dict. A template error,
  // including the template's own raise_exception(msg), throws medtune::BadInput carrying msg.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string source_;
  std::string origin_;
  std::vector<std::unique_ptr<jinja::Stmt>> body_;
};

}  // namespace medtune::tokenizer
