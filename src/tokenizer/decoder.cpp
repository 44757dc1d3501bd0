#include "tokenizer/decoder.h"

#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

// "<0xE2>" -> 0xE2; -1 when the piece is not a byte token.
int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;  // Rust's from_str_radix accepts both cases
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void byte_level(std::vector<std::string>& pieces) {
  std::string bytes;
  for (const auto& p : pieces) {
    // A piece made only of mapped characters is turned back into bytes; any other piece (an
    // added token written in plain text) is taken as it is, as HF's ByteLevel decoder does.
    const size_t mark = bytes.size();
    if (!unicode_to_bytes(p, bytes)) {
      bytes.resize(mark);
      bytes += p;
    }
  }
  pieces.assign(1, sanitize_utf8(bytes));  // String::from_utf8_lossy
}

void byte_fallback(std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  std::string pending;  // consecutive byte tokens
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    if (sanitize_utf8(pending) == pending) {
      out.push_back(pending);
    } else {
      // Invalid bytes: one U+FFFD per byte token, as HF does (not per maximal subpart).
      // Each is its own piece, which matters to a later Strip.
      for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pending_count = 0;
  };
  for (auto& p : pieces) {
    const int b = parse_byte_piece(p);
    if (b >= 0) {
      pending.push_back(static_cast<char>(b));
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(p));
    }
  }
  flush();
  pieces = std::move(out);
}

void strip(std::vector<std::string>& pieces, const std::string& ch, size_t start, size_t stop) {
  for (auto& p : pieces) {
    size_t b = 0;
    for (size_t k = 0; k < start && p.compare(b, ch.size(), ch) == 0; ++k) b += ch.size();
    size_t e = p.size();
    for (size_t k = 0; k < stop && e >= b + ch.size() && p.compare(e - ch.size(), ch.size(), ch) == 0; ++k) {
      e -= ch.size();
    }
    p = p.substr(b, e - b);
  }
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> pieces) const {
  if (steps_.empty()) {
    std::string out;
    for (size_t i = 0; i < pieces.size(); ++i) out += (i ? " " : "") + pieces[i];
    return out;
  }
  for (const auto& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel:
        byte_level(pieces);
        break;
      case DecoderStep::Kind::ByteFallback:
        byte_fallback(pieces);
        break;
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const auto& p : pieces) all += p;
        pieces.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::Replace:
        for (auto& p : pieces) {
          if (step.regex) {
            std::vector<std::pair<size_t, size_t>> hits;
            step.regex->find_all(p, hits);
            std::string out;
            size_t pos = 0;
            for (const auto& [b, e] : hits) {
              out.append(p, pos, b - pos);
              out += step.content;
              pos = e;
            }
            out.append(p, pos, std::string::npos);
            p = std::move(out);
          } else {
            replace_all(p, step.pattern, step.content);
          }
        }
        break;
      case DecoderStep::Kind::Strip:
        strip(pieces, step.content, step.start, step.stop);
        break;
      case DecoderStep::Kind::Metaspace:
        // HF drops every replacement character of the first piece (not only a leading one).
        for (size_t i = 0; i < pieces.size(); ++i) {
          replace_all(pieces[i], step.replacement, i == 0 && step.prepend ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (const auto& p : pieces) out += p;
  return out;
}

}  // namespace medtune::tokenizer
