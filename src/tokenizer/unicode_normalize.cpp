#include "tokenizer/unicode_normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uniset.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

// The characters HF tokenizers' normalization tables know: those assigned by Unicode 9.0 (see
// the header), and among them the combining marks that StripAccents removes. General_Category,
// unlike decompositions, is not frozen: three characters changed it after 9.0, found by the
// exhaustive test (test_unicode_normalizers.cpp): U+1CF2 and U+1CF3 (Vedic signs, Mc in 9.0,
// Lo since 10.0) are marks to HF, U+111C9 (Sharada sandhi mark, Po in 9.0, Mn since) is not.
constexpr const char* kHfNormalizationAge = "[:age=9.0:]";
constexpr const char* kHfCombiningMarks = "[[[:M:]&[:age=9.0:]][\\u1CF2\\u1CF3]-[\\U000111C9]]";

const icu::UnicodeSet& frozen_set(const char* pattern) {
  UErrorCode status = U_ZERO_ERROR;
  auto* set = new icu::UnicodeSet(icu::UnicodeString(pattern, -1, US_INV), status);
  if (U_FAILURE(status)) throw Internal(std::string("ICU UnicodeSet ") + pattern + ": " + u_errorName(status));
  set->freeze();
  return *set;  // lives for the program, shared read-only by all threads (frozen sets are thread-safe)
}

const icu::Normalizer2& base_instance(UnicodeForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::NFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case UnicodeForm::NFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case UnicodeForm::NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case UnicodeForm::NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || n == nullptr) throw Internal(std::string("ICU normalizer: ") + u_errorName(status));
  return *n;
}

// ICU's form restricted to the characters HF's tables know (Unicode 9.0).
const icu::Normalizer2& hf_normalizer(UnicodeForm form) {
  static const icu::UnicodeSet& known = frozen_set(kHfNormalizationAge);
  static const icu::FilteredNormalizer2 nfc(base_instance(UnicodeForm::NFC), known);
  static const icu::FilteredNormalizer2 nfd(base_instance(UnicodeForm::NFD), known);
  static const icu::FilteredNormalizer2 nfkc(base_instance(UnicodeForm::NFKC), known);
  static const icu::FilteredNormalizer2 nfkd(base_instance(UnicodeForm::NFKD), known);
  switch (form) {
    case UnicodeForm::NFC: return nfc;
    case UnicodeForm::NFD: return nfd;
    case UnicodeForm::NFKC: return nfkc;
    case UnicodeForm::NFKD: return nfkd;
  }
  return nfc;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Full lowercase mapping of one code point, without context (as Rust's char::to_lowercase).
void append_lowercase(std::string& out, uint32_t cp) {
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, cp);
  UChar dst[8];  // the longest full lowercase mapping is 3 UTF-16 units
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
  if (U_FAILURE(status)) throw Internal(std::string("ICU u_strToLower: ") + u_errorName(status));
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(dst, i, n, c);
    utf8_append(out, static_cast<uint32_t>(c));
  }
}

}  // namespace

void unicode_normalize(std::string& text, UnicodeForm form) {
  if (is_ascii(text)) return;  // ASCII is invariant under all four forms
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  hf_normalizer(form).normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                                    nullptr, status);
  if (U_FAILURE(status)) throw Internal(std::string("ICU normalizeUTF8: ") + u_errorName(status));
  text.swap(out);
}

void unicode_lowercase(std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unsigned char b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b));
      ++pos;
    } else {
      append_lowercase(out, utf8_next(text, pos));
    }
  }
  text.swap(out);
}

void unicode_strip(std::string& text, bool left, bool right) {
  size_t begin = 0;
  if (left) {
    for (size_t pos = 0; pos < text.size();) {
      if (!is_unicode_whitespace(utf8_next(text, pos))) break;
      begin = pos;
    }
  }
  size_t end = text.size();
  if (right) {
    // Walk back over whole characters: find each character's start, test it.
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!is_unicode_whitespace(utf8_next(text, pos))) break;
      end = start;
    }
  }
  if (begin == 0 && end == text.size()) return;
  text = text.substr(begin, end - begin);
}

void unicode_strip_accents(std::string& text) {
  static const icu::UnicodeSet& marks = frozen_set(kHfCombiningMarks);
  if (is_ascii(text)) return;
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8_next(text, pos);
    if (!marks.contains(static_cast<UChar32>(cp))) out.append(text, start, pos - start);
  }
  text.swap(out);
}

void nmt_normalize(std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8_next(text, pos);
    const bool drop = (cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F ||
                      cp == 0x8F || cp == 0x9F;
    if (drop) continue;
    const bool space = cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0x1680 ||
                       (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 || cp == 0x2581 ||
                       cp == 0xFEFF || cp == 0xFFFD;
    if (space) {
      out.push_back(' ');
    } else {
      out.append(text, start, pos - start);
    }
  }
  text.swap(out);
}

}  // namespace medtune::tokenizer
