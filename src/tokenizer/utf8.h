// UTF-8 helpers for the tokenizer: decoding code points, and replacing invalid input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace medtune::tokenizer {

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for continuation/invalid bytes,
// so that a scan always advances).
size_t utf8_char_len(unsigned char lead);

// Decodes the code point at `pos` of valid UTF-8 `s` and advances `pos`.
uint32_t utf8_next(std::string_view s, size_t& pos);

// Appends the UTF-8 encoding of `cp`.
void utf8_append(std::string& out, uint32_t cp);

// Returns `bytes` with every ill-formed sequence replaced by U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") does (one U+FFFD per maximal subpart, Unicode §3.9).
// Hugging Face tokenizers takes a Rust String, so invalid bytes never reach it; from Python they
// are replaced this way before it sees them, and medtune does the same before encoding.
std::string sanitize_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that ends on a character boundary, assuming the
// bytes are valid UTF-8 except that the last character may be incomplete.
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace medtune::tokenizer

namespace medtune::tokenizer {

// Unicode White_Space (what Rust's char::is_whitespace tests), used by added-token stripping.
bool is_unicode_whitespace(uint32_t cp);

}  // namespace medtune::tokenizer
