// GPT-2's reversible byte <-> printable-unicode mapping used by byte-level BPE vocabularies
// (GPT-2, SmolLM2, Llama-3, Qwen2): every byte gets a visible character so that merges never
// see raw control bytes or spaces (the space byte becomes 'Ġ', U+0120).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace medtune::tokenizer {

// UTF-8 text of the character that stands for byte `b`.
const std::string& byte_to_unicode(uint8_t b);

// Appends the mapped characters of every byte in `bytes` to `out`.
void bytes_to_unicode(std::string_view bytes, std::string& out);

// Inverse: maps the characters of `text` back to bytes. Returns false (leaving `out` partly
// written) when a character is not one of the 256 mapped characters.
bool unicode_to_bytes(std::string_view text, std::string& out);

}  // namespace medtune::tokenizer
