#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace medtune::tokenizer {
namespace {

constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCacheEntries = 200000;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string byte_piece(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      index_(std::move(other.index_)),
      merges_(std::move(other.merges_)),
      scores_(std::move(other.scores_)),
      byte_ids_(std::move(other.byte_ids_)),
      options_(std::move(other.options_)) {}

void BpeModel::build_index(const std::string& where) {
  index_.reserve(vocab_.size() * 2);
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_[id].empty()) continue;
    // Duplicate pieces: the first id wins, as a lookup of the piece finds one id only.
    index_.emplace(vocab_[id], static_cast<int32_t>(id));
  }
  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) byte_ids_[static_cast<size_t>(b)] = token_id(byte_piece(static_cast<uint8_t>(b)));
  if (options_.unk_id >= static_cast<int32_t>(vocab_.size())) {
    throw BadInput(where + ": unknown-token id " + std::to_string(options_.unk_id) +
                   " is outside the vocabulary of " + std::to_string(vocab_.size()));
  }
}

BpeModel BpeModel::with_merges(std::vector<std::string> vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               BpeOptions options, const std::string& where) {
  BpeModel m;
  m.vocab_ = std::move(vocab);
  m.options_ = std::move(options);
  m.build_index(where);
  const size_t prefix_len = m.options_.continuing_subword_prefix.size();
  m.merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t a_id = m.token_id(a);
    const int32_t b_id = m.token_id(b);
    std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    const int32_t new_id = m.token_id(merged);
    if (a_id < 0 || b_id < 0 || new_id < 0) {
      throw BadInput(where + ": merge " + std::to_string(rank) + " ('" + a + "' '" + b +
                     "') uses or makes a piece that is not in the vocabulary");
    }
    // A repeated pair keeps its last rank, as HF's map construction does.
    m.merges_[pair_key(a_id, b_id)] = {static_cast<int32_t>(rank), new_id};
  }
  return m;
}

BpeModel BpeModel::with_scores(std::vector<std::string> vocab, std::vector<float> scores,
                               BpeOptions options, const std::string& where) {
  if (scores.size() != vocab.size()) {
    throw BadInput(where + ": " + std::to_string(scores.size()) + " scores for " +
                   std::to_string(vocab.size()) + " tokens");
  }
  BpeModel m;
  m.vocab_ = std::move(vocab);
  m.scores_ = std::move(scores);
  m.options_ = std::move(options);
  m.build_index(where);
  return m;
}

int32_t BpeModel::token_id(std::string_view piece) const {
  const auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = token_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (scores_.empty()) {
    initial_symbols(word, ids);
    merge_by_rank(ids);
  } else {
    merge_by_score(word, ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries) cache_.emplace(std::string(word), std::move(ids));
  }
}

// One symbol per character, as HF's BPE::merge_word: prefix/suffix decorations, byte fallback,
// then the unknown token (fused or not). Unknown characters without an unk token are dropped.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;  // an unk waiting to be emitted (so that fuse_unk can extend it)
  size_t pos = 0;
  std::string piece;
  while (pos < word.size()) {
    const size_t start = pos;
    pos += utf8_char_len(static_cast<unsigned char>(word[pos]));
    if (pos > word.size()) pos = word.size();
    piece.clear();
    if (start > 0) piece += options_.continuing_subword_prefix;
    piece.append(word.substr(start, pos - start));
    if (pos == word.size()) piece += options_.end_of_word_suffix;
    const int32_t id = token_id(piece);
    if (id >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (size_t i = start; i < pos; ++i) all = all && byte_ids_[static_cast<uint8_t>(word[i])] >= 0;
      if (all) {
        // HF emits the byte tokens without flushing a pending unk first; keep that order.
        for (size_t i = start; i < pos; ++i) ids.push_back(byte_ids_[static_cast<uint8_t>(word[i])]);
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (pending_unk >= 0 && !options_.fuse_unk) ids.push_back(pending_unk);
      pending_unk = options_.unk_id;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

void BpeModel::merge_by_rank(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  // Doubly linked symbols; merged-away symbols get id -1.
  std::vector<int> prev(static_cast<size_t>(n));
  std::vector<int> next(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int pos) {
    if (pos < 0) return;
    const int nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    const auto it = merges_.find(pair_key(ids[static_cast<size_t>(pos)], ids[static_cast<size_t>(nx)]));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto p = static_cast<size_t>(top.pos);
    if (ids[p] < 0 || next[p] < 0) continue;
    const auto r = static_cast<size_t>(next[p]);
    // Stale entry: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(ids[p], ids[r]));
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    ids[p] = top.new_id;
    ids[r] = -1;
    next[p] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = top.pos;
    push(prev[p]);
    push(top.pos);
  }
  size_t w = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= 0) ids[w++] = ids[i];
  }
  ids.resize(w);
}

void BpeModel::merge_by_score(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t begin;
    size_t len;
    int prev;
    int next;
  };
  std::vector<Symbol> sym;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = utf8_char_len(static_cast<unsigned char>(word[pos]));
    if (pos + len > word.size()) len = word.size() - pos;
    const int idx = static_cast<int>(sym.size());
    sym.push_back({pos, len, idx - 1, -1});
    if (idx > 0) sym[static_cast<size_t>(idx - 1)].next = idx;
    pos += len;
  }
  struct Bigram {
    float score;
    int left;
    size_t len;  // byte length of the merged text, to detect stale entries
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;  // max score, then leftmost
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = sym[static_cast<size_t>(left)];
    const Symbol& r = sym[static_cast<size_t>(right)];
    const int32_t id = token_id(word.substr(l.begin, l.len + r.len));
    if (id < 0) return;
    queue.push({scores_[static_cast<size_t>(id)], left, l.len + r.len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i - 1), static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[static_cast<size_t>(b.left)];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[static_cast<size_t>(l.next)];
    if (l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& s = sym[static_cast<size_t>(i)];
    const std::string_view text = word.substr(s.begin, s.len);
    const int32_t id = token_id(text);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Only single characters can be missing (merges need a vocabulary piece): bytes, then unk.
    for (char c : text) {
      const int32_t bid = options_.byte_fallback ? byte_ids_[static_cast<uint8_t>(c)] : -1;
      if (bid >= 0) {
        out.push_back(bid);
      } else if (options_.unk_id >= 0) {
        out.push_back(options_.unk_id);
        break;  // one unk for the whole character
      }
    }
  }
}

}  // namespace medtune::tokenizer
