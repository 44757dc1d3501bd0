// The tokenizer.* metadata llama.cpp reads, built from a Hugging Face tokenizer.json (and the
// tokenizer_config.json next to it), so that a GGUF exported from a Hugging Face directory
// tokenizes as the model did. It writes what llama.cpp's convert_hf_to_gguf.py writes for a
// byte-level BPE vocabulary (its get_vocab_base + gguf.SpecialVocab): model "gpt2", the
// pre-tokenizer's llama.cpp name, tokens (padded to the model's vocab_size with "[PAD<i>]"),
// token types, merges, the special token ids, add_bos/add_eos and the chat template.
//
// SentencePiece-style vocabularies (Llama-2, Mistral: BPE with byte_fallback) are not converted:
// llama.cpp's "llama" vocabulary needs per-token scores that tokenizer.json does not hold (gguf-py's
// own LlamaHfVocab writes -1000 for every token, which changes the merges), so the caller gets a
// reason instead of metadata that would tokenize differently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf_writer.h"

namespace medtune::tokenizer {

struct GgufTokenizerMetadata {
  std::optional<io::GgufMetadata> metadata;  // set when the tokenizer converts
  std::string unsupported;                   // otherwise why not, naming the file and field
  std::vector<std::string> notes;            // where llama.cpp will still differ
};

// `tokenizer_json`: path of a tokenizer.json; `vocab_size`: the model's (config.json) vocab size,
// which may exceed the tokenizer's (padding rows) but never be smaller. Malformed files throw
// BadInput as Tokenizer::from_tokenizer_json does.
GgufTokenizerMetadata gguf_tokenizer_metadata(const std::string& tokenizer_json, int64_t vocab_size);

}  // namespace medtune::tokenizer
