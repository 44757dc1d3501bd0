// Unicode normalizers of Hugging Face tokenizer.json files (NFC, NFD, NFKC, NFKD, Lowercase,
// Strip, StripAccents, Nmt), on valid UTF-8, through ICU.
//
// Unicode versions. HF `tokenizers` normalizes with the Rust crate unicode-normalization-alignments,
// whose tables are Unicode 9.0 (measured: tools/make_tokenizer_fixtures.py compares every code
// point; the first characters it leaves alone are those assigned in Unicode 10.0). Debian 12's
// ICU 72 is Unicode 15.0. Unicode's stability policy freezes the decomposition and combining
// class of every assigned character, so the 9.0 forms are exactly ICU's forms restricted to the
// characters assigned by 9.0: ICU's FilteredNormalizer2 with the set [:age=9.0:] (the same device
// ICU uses for IDNA's Unicode 3.2). Characters assigned later pass through unchanged, as in HF.
// StripAccents uses the crate's is_combining_mark, also 9.0: General_Category Mark as of 9.0.
// Lowercase uses Rust's char::to_lowercase, whose Unicode version is that of the Rust compiler
// that built the wheel (17.0 for tokenizers 0.23.3): the 55 capital letters added in Unicode
// 16.0 and 17.0 (U+1C89, 7 Latin in U+A7CB..U+A7DC, 22 Garay, 25 Beria Erfe) are lowercased by
// HF but not here, because ICU 72 does not know them. docs/tokenizer.md says what that means.
#pragma once

#include <string>

namespace medtune::tokenizer {

enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

// `text` must be valid UTF-8 (the tokenizer sanitizes input first).
void unicode_normalize(std::string& text, UnicodeForm form);

// Rust's char::to_lowercase applied to every character: the full (one-to-many) mapping without
// context, e.g. U+0130 -> "i\u0307" and a final capital sigma -> small sigma (not final sigma).
void unicode_lowercase(std::string& text);

// Removes leading and/or trailing White_Space characters (Rust's char::is_whitespace).
void unicode_strip(std::string& text, bool left, bool right);

// Removes every combining mark (General_Category M, as of Unicode 9.0).
void unicode_strip_accents(std::string& text);

// HF's Nmt normalizer (SentencePiece's nmt_nfkc without the NFKC): drops the ASCII control
// characters 0x01-0x08, 0x0B, 0x0E-0x1F, 0x7F and C1 0x8F, 0x9F; maps tab, LF, FF, CR, U+1680,
// U+200B-U+200F, U+2028, U+2029, U+2581, U+FEFF and U+FFFD to a space.
void nmt_normalize(std::string& text);

}  // namespace medtune::tokenizer
