#include "tokenizer/utf8.h"

namespace medtune::tokenizer {

size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t utf8_next(std::string_view s, size_t& pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  size_t len = utf8_char_len(lead);
  if (pos + len > s.size()) len = 1;
  uint32_t cp = 0;
  switch (len) {
    case 1: cp = lead; break;
    case 2: cp = lead & 0x1Fu; break;
    case 3: cp = lead & 0x0Fu; break;
    default: cp = lead & 0x07u; break;
  }
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3Fu);
  pos += len;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// The allowed range of the second byte after `lead` (Unicode Table 3-7); the others are 80..BF.
// Returns false when `lead` cannot start a sequence at all.
bool second_byte_range(unsigned char lead, unsigned char& lo, unsigned char& hi, size_t& len) {
  lo = 0x80;
  hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) { len = 2; return true; }
  if (lead == 0xE0) { len = 3; lo = 0xA0; return true; }
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) { len = 3; return true; }
  if (lead == 0xED) { len = 3; hi = 0x9F; return true; }  // no surrogates
  if (lead == 0xF0) { len = 4; lo = 0x90; return true; }
  if (lead >= 0xF1 && lead <= 0xF3) { len = 4; return true; }
  if (lead == 0xF4) { len = 4; hi = 0x8F; return true; }  // nothing above U+10FFFF
  return false;
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    unsigned char lo = 0;
    unsigned char hi = 0;
    size_t len = 0;
    if (!second_byte_range(lead, lo, hi, len)) {
      out += kReplacement;  // a lone continuation byte or C0, C1, F5..FF
      ++i;
      continue;
    }
    // Walk the continuation bytes; stop at the first that does not fit. The valid prefix
    // consumed so far (the "maximal subpart") becomes one U+FFFD, and scanning resumes at the
    // offending byte, as Python and the WHATWG decoder do.
    size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      const auto c = static_cast<unsigned char>(bytes[i + k]);
      const unsigned char l = k == 1 ? lo : 0x80;
      const unsigned char h = k == 1 ? hi : 0xBF;
      if (c < l || c > h) break;
    }
    if (k == len) {
      out.append(bytes.substr(i, len));
    } else {
      out += kReplacement;
    }
    i += k;
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t len = utf8_char_len(c);
    return len > back ? n - back : n;
  }
  return n;
}

}  // namespace medtune::tokenizer

namespace medtune::tokenizer {

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace medtune::tokenizer
