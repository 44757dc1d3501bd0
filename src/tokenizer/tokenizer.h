// Tokenizer: text <-> token ids, token-for-token identical to Hugging Face `tokenizers` for the
// Llama-family tokenizers medtune loads (byte-level BPE: GPT-2, SmolLM2, Llama-3, Qwen2;
// SentencePiece-style BPE with byte fallback: Llama-2, Mistral).
//
// Pipeline of encode(), as HF's TokenizerImpl::encode:
//   invalid UTF-8 -> U+FFFD (sanitize_utf8) -> cut out added tokens -> per text piece:
//   normalizer -> pre-tokenizer -> BPE per word -> post-processor (BOS/EOS) when add_special.
// Invalid UTF-8 input: HF tokenizers only ever sees valid text (a Rust String; Python callers
// decode first), so medtune replaces each ill-formed sequence by U+FFFD exactly as Python's
// bytes.decode("utf-8", errors="replace") and encodes the result. See docs/tokenizer.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace medtune::io {
class GgufFile;
}

namespace medtune::tokenizer {

// Everything a loader (tokenizer.json or GGUF) decides; the Tokenizer only runs it.
struct TokenizerSpec {
  std::string source;  // file name, for messages
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  std::vector<int32_t> prefix_ids;  // post-processor: ids put before the text (BOS)
  std::vector<int32_t> suffix_ids;  // and after it (EOS)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);

  // GGUF metadata tokenizer.ggml.* (model "gpt2" or "llama"). Throws BadInput naming the file
  // and key for anything missing, inconsistent or unsupported.
  static std::unique_ptr<Tokenizer> from_gguf(const io::GgufFile& gguf);
  // A Hugging Face tokenizer.json. bos/eos/pad come from a tokenizer_config.json next to it
  // when there is one (tokenizer.json itself does not name them).
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& path);

  // `text` may be any bytes (see the note above on invalid UTF-8). Added tokens in the text are
  // always matched; `add_special` adds what the post-processor adds (BOS for Llama-2/3).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;
  // Unknown ids are dropped, as HF does. Ill-formed bytes become U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The vocabulary piece of `id` ("Ġworld", "<0xE2>", "<|im_end|>"), as HF's
  // convert_ids_to_tokens. Throws BadInput for an id outside the vocabulary.
  std::string token_piece(int32_t id) const;
  int32_t token_id(std::string_view piece) const;  // -1 when absent
  bool is_special(int32_t id) const;

  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  size_t vocab_size() const { return vocab_size_; }

 private:
  void encode_text(std::string_view text, bool at_text_start, std::vector<int32_t>& ids) const;
  const std::string* piece_or_null(int32_t id) const;

  TokenizerSpec spec_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized = true
  // Those tokens with their content normalized: HF matches the normalized form (a Lowercase
  // normalizer makes "MedTune" match "medtune"; Prepend("▁") makes it "▁medtune").
  std::vector<AddedToken> normalized_forms_;
  std::unordered_map<int32_t, const std::string*> normalized_piece_by_id_;  // what decode shows
  std::unordered_map<int32_t, const AddedToken*> added_by_id_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_by_content_;
  size_t vocab_size_ = 0;
};

}  // namespace medtune::tokenizer
