#include "tokenizer/byte_level.h"

#include <vector>

#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::vector<int16_t> from_codepoint;  // code point -> byte, -1 when unmapped (code points < 512)

  ByteTables() : from_codepoint(512, -1) {
    // Printable Latin-1 bytes map to themselves; the other 68 bytes take U+0100, U+0101, ...
    // in byte order (GPT-2's bytes_to_unicode()).
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      utf8_append(to_unicode[b], cp);
      from_codepoint[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return tables().to_unicode[b]; }

void bytes_to_unicode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (char c : bytes) out += t.to_unicode[static_cast<uint8_t>(c)];
}

bool unicode_to_bytes(std::string_view text, std::string& out) {
  const auto& t = tables();
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = utf8_next(text, pos);
    if (cp >= t.from_codepoint.size() || t.from_codepoint[cp] < 0) return false;
    out.push_back(static_cast<char>(t.from_codepoint[cp]));
  }
  return true;
}

}  // namespace medtune::tokenizer
