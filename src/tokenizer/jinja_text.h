// UTF-8 string helpers with Python's str semantics: lengths and slices count code points,
// strip() removes Unicode whitespace, and escapes in string literals decode like Python's.
// Chat messages are clinical text in many languages, so byte-wise versions would be wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace medtune::tokenizer::jinja {

// Decodes UTF-8 into code points; malformed bytes decode to themselves (as Latin-1) so a
// broken string still round-trips through slicing.
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(const std::vector<char32_t>& cps);
std::size_t utf8_length(std::string_view s);

// str.isspace(): ASCII whitespace, \x1c-\x1f, \x85, \xa0 and the Unicode space separators.
bool is_python_space(char32_t cp);
// str.strip()/lstrip()/rstrip(): without chars, Unicode whitespace; with chars, those code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (the scripts clinical
// text in our corpora uses); other code points are left unchanged.
char32_t to_upper_cp(char32_t cp);
char32_t to_lower_cp(char32_t cp);
bool is_cased_letter(char32_t cp);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()

// str.split(sep=None, maxsplit=-1) and str.split(sep, maxsplit).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit);
std::string py_replace(std::string_view s, std::string_view old, std::string_view with,
                       std::int64_t count);

// Decodes the body of a string literal the way jinja2 does (Python's "unicode-escape"):
// \n \t \r \\ \' \" \a \b \f \v \ooo \xhh \uhhhh \Uhhhhhhhh; unknown escapes stay as written.
// Returns an error message instead of a string when an escape is malformed.
std::optional<std::string> decode_string_literal(std::string_view body, std::string& error);

}  // namespace medtune::tokenizer::jinja
