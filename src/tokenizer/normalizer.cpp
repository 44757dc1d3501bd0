#include "tokenizer/normalizer.h"

#include <utility>

namespace medtune::tokenizer {

void prepend(std::string& text, std::string_view prefix) {
  std::string out;
  out.reserve(prefix.size() + text.size());
  out.append(prefix);
  out.append(text);
  text.swap(out);
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out += to;
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

void Normalizer::normalize(std::string& text) const {
  for (const auto& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::Prepend:
        if (!text.empty()) prepend(text, step.text);  // HF prepends to non-empty text only
        break;
      case NormalizerStep::Kind::Replace:
        if (step.regex) {
          std::vector<std::pair<size_t, size_t>> hits;
          step.regex->find_all(text, hits);
          std::string out;
          size_t pos = 0;
          for (const auto& [b, e] : hits) {
            out.append(text, pos, b - pos);
            out += step.content;
            pos = e;
          }
          out.append(text, pos, std::string::npos);
          text = std::move(out);
        } else {
          replace_all(text, step.text, step.content);
        }
        break;
      case NormalizerStep::Kind::Unicode:
        unicode_normalize(text, step.form);
        break;
      case NormalizerStep::Kind::Lowercase:
        unicode_lowercase(text);
        break;
      case NormalizerStep::Kind::Strip:
        unicode_strip(text, step.strip_left, step.strip_right);
        break;
      case NormalizerStep::Kind::StripAccents:
        unicode_strip_accents(text);
        break;
      case NormalizerStep::Kind::Nmt:
        nmt_normalize(text);
        break;
    }
  }
}

}  // namespace medtune::tokenizer
