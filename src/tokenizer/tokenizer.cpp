#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  if (!spec_.model) throw Internal(spec_.source + ": tokenizer built without a model");
  std::vector<const AddedToken*> raw;
  std::vector<const AddedToken*> normalized;
  vocab_size_ = spec_.model->size();
  normalized_forms_.reserve(spec_.added_tokens.size());  // no reallocation: pointers are kept
  for (const AddedToken& t : spec_.added_tokens) {
    if (t.id < 0) throw BadInput(spec_.source + ": added token '" + t.content + "' has a negative id");
    if (t.normalized) {
      normalized_forms_.push_back(t);
      spec_.normalizer.normalize(normalized_forms_.back().content);
      normalized.push_back(&normalized_forms_.back());
      normalized_piece_by_id_[t.id] = &normalized_forms_.back().content;
    } else {
      raw.push_back(&t);
    }
    added_by_id_[t.id] = &t;
    added_by_content_.emplace(t.content, t.id);
    vocab_size_ = std::max(vocab_size_, static_cast<size_t>(t.id) + 1);
  }
  raw_matcher_ = AddedTokenMatcher(raw);
  normalized_matcher_ = AddedTokenMatcher(normalized);
}

void Tokenizer::encode_text(std::string_view text, bool at_text_start,
                            std::vector<int32_t>& ids) const {
  std::string normalized(text);
  spec_.normalizer.normalize(normalized);
  std::vector<Segment> segments;
  if (normalized_matcher_.empty()) {
    segments.push_back({normalized, -1});
  } else {
    normalized_matcher_.split(normalized, segments);
  }
  std::vector<std::string> words;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].id >= 0) {
      ids.push_back(segments[s].id);
      continue;
    }
    words.clear();
    if (spec_.pre_tokenizer.empty()) {
      words.emplace_back(segments[s].text);
    } else {
      spec_.pre_tokenizer.split(segments[s].text, at_text_start && s == 0, words);
    }
    for (const auto& w : words) spec_.model->encode_word(w, ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const std::string valid = sanitize_utf8(text);
  std::vector<int32_t> ids;
  ids.reserve(valid.size() / 3 + 4);
  if (add_special) ids.insert(ids.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  std::vector<Segment> segments;
  raw_matcher_.split(valid, segments);
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      encode_text(seg.text, seg.text.data() == valid.data(), ids);
    }
  }
  if (add_special) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return ids;
}

const std::string* Tokenizer::piece_or_null(int32_t id) const {
  if (id < 0) return nullptr;
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return &it->second->content;
  if (static_cast<size_t>(id) < spec_.model->size() && !spec_.model->piece(id).empty()) {
    return &spec_.model->piece(id);
  }
  return nullptr;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* p = piece_or_null(id);
    if (p == nullptr) continue;
    if (skip_special && is_special(id)) continue;
    // HF (simple_id_to_token) decodes a normalized added token as its normalized form.
    if (!normalized_piece_by_id_.empty()) {
      const auto norm = normalized_piece_by_id_.find(id);
      if (norm != normalized_piece_by_id_.end()) p = norm->second;
    }
    pieces.push_back(*p);
  }
  return spec_.decoder.decode(std::move(pieces));
}

std::string Tokenizer::token_piece(int32_t id) const {
  const std::string* p = piece_or_null(id);
  if (p == nullptr) {
    throw BadInput(spec_.source + ": token id " + std::to_string(id) +
                   " is outside the vocabulary of " + std::to_string(vocab_size_));
  }
  return *p;
}

int32_t Tokenizer::token_id(std::string_view piece) const {
  const auto it = added_by_content_.find(piece);
  if (it != added_by_content_.end()) return it->second;
  return spec_.model->token_id(piece);
}

bool Tokenizer::is_special(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second->special;
}

}  // namespace medtune::tokenizer
