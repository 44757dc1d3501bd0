// Training examples: a context (prompt) and a target (the answer), as token ids, from MedQA items
// or chat conversations, and the dataset-level operations on them that decide what a run sees:
// truncation to sequence_len, the validation split, and the per-epoch order.
//
// Rendering text into ids needs a tokenizer and a prompt renderer, which live in areas above
// train/ in the build's layering (tokenizer/, eval/). So the rendering steps here take the
// tokenizer and the template as functions; apps/medtune/cmd_train.cpp binds them.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace medtune::train {

// The tokens of one training sequence and which of them the loss is computed on. The text is
// context + answer. With an empty answer_mask (medqa, chat) the answer is one trained span, and
// train_on_inputs trains the context too (make_batch applies it). The axolotl types
// (train/dataset_formats.h) decide every token themselves, train_on_inputs included: context is
// then the untrained tokens before the first trained one, and answer_mask[i] says whether answer
// token i is trained (the first always is), so a conversation trains every assistant turn and not
// the user turns between them.
struct Example {
  std::vector<int32_t> context;  // prompt tokens (BOS included where the model wants one)
  std::vector<int32_t> answer;   // the completion: what the loss is computed on
  std::vector<uint8_t> answer_mask;  // empty, or one 0/1 per answer token (see above)
  std::string source;            // "<file>:<line>", for messages
  int64_t length() const { return static_cast<int64_t>(context.size() + answer.size()); }
  // Whether answer token i is a target (without train_on_inputs).
  bool answer_trained(size_t i) const { return answer_mask.empty() || answer_mask[i] != 0; }
  // Tokens the loss is computed on, train_on_inputs aside.
  int64_t trained_tokens() const;
};

// An Example from a token sequence and its per-token loss mask (1: trained): the context is the
// tokens before the first trained one. BadInput naming source when no token is trained.
Example masked_example(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& trained,
                       const std::string& source);

// Makes the example fit sequence_len + 1 tokens (the +1: the last token is only a target, never
// an input, so a batch row of T inputs holds T + 1 tokens of text), by dropping context tokens
// from the left: the end of the prompt (the question's options, the answer cue) matters most.
// With an empty answer_mask (medqa, chat) the answer is never cut: an answer that alone does not
// fit is a BadInput naming ex.source. With an answer_mask (the axolotl types) the context is cut
// the same way (keeping one token before the first target), and an answer still too long is then
// cut at its end, as axolotl's `excess_length_strategy: truncate` does: the first trained tokens
// are kept, later turns are lost. Returns how many tokens were dropped.
int64_t truncate_left(Example& ex, int64_t sequence_len);

// One line of a JSONL dataset as JSON; BadInput naming `where` ("<file>:<line>") when it is not
// valid JSON or holds a number beyond a double (naming its field).
nlohmann::json parse_jsonl_record(const std::string& line, const std::string& where);

// Calls fn(line, "<file>:<line>") for each non-blank line of a JSONL file; `what` names the file
// in messages ("chat dataset").
void for_each_jsonl_line(const std::string& path, const std::string& what,
                         const std::function<void(const std::string& line, const std::string& where)>& fn);

// One chat conversation of a `type: chat` dataset line: {"messages": [{"role", "content"}, ...]}.
struct ChatRecord {
  std::vector<tokenizer::ChatMessage> messages;
  std::string source;  // "<file>:<line>"
};
// Reads a JSONL file of conversations. Each must end with an assistant message (the target) and
// have at least one message before it; BadInput naming file, line and field otherwise. With
// `skipped` given (skip_invalid), a bad record's message is appended there instead and the record
// left out; a file with no valid conversation is still an error.
std::vector<ChatRecord> read_chat_jsonl(const std::string& path, std::vector<std::string>* skipped = nullptr);

// apply(messages, add_generation_prompt) -> text, as ChatTemplate::apply with the model's
// bos/eos bound; encode(text) -> ids without post-processor tokens (the template writes BOS).
using ApplyTemplate =
    std::function<std::string(const std::vector<tokenizer::ChatMessage>&, bool add_generation_prompt)>;
using EncodeText = std::function<std::vector<int32_t>(const std::string&)>;

// context = the conversation without its last (assistant) message, with the generation prompt;
// answer = what the full conversation's rendering adds after that (the assistant's text and the
// template's end-of-turn tokens, so the model learns to stop). The full rendering must start with
// the context rendering (true of every template we know); when the two tokenizations disagree at
// the seam, the answer is the remainder text encoded on its own.
Example chat_example(const ChatRecord& rec, const ApplyTemplate& apply, const EncodeText& encode);

// A deterministic validation split: the items whose positions come first in a seeded permutation
// (Fisher-Yates on mt19937_64(seed)) go to validation; both halves keep file order. count is
// fraction * n rounded up (as axolotl's train_test_split) or the given count; BadInput when it
// leaves no training data.
struct Split {
  std::vector<int64_t> train, val;  // indices into the input
};
Split split_validation(int64_t n, double fraction, int64_t count, uint64_t seed);

// Fisher-Yates with std::mt19937_64 and our own bounded draw, so the order is the same with any
// standard library (std::shuffle and std::uniform_int_distribution are implementation-defined).
void fisher_yates(std::vector<int64_t>& v, std::mt19937_64& rng);
// Uniform in [0, n) by rejection (no modulo bias); n > 0.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);
// The seed of epoch e's shuffle: a splitmix64 mix of (seed, epoch), so epochs are independent
// streams and any epoch can be regenerated on its own (resume).
uint64_t mix_seed(uint64_t seed, uint64_t salt);

}  // namespace medtune::train
