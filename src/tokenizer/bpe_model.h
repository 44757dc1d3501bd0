// The BPE model: turns one pre-tokenized word into token ids.
//
// Two ways to choose the next merge, because the two model families define it differently:
//  - by merge rank (Hugging Face BPE, tokenizer.json "merges", GGUF tokenizer.ggml.merges):
//    repeatedly merge the adjacent pair with the lowest rank, leftmost first;
//  - by score (SentencePiece BPE, GGUF tokenizer.ggml.model = "llama"): repeatedly merge the
//    adjacent pair whose concatenation is a vocabulary piece with the highest score, leftmost
//    first (llama.cpp's llm_tokenizer_spm and sentencepiece's bpe_model do this).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace medtune::tokenizer {

// Lets unordered_map<std::string, ...> be searched with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct BpeOptions {
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
  bool ignore_merges = false;  // a word that is itself in the vocabulary is taken whole (Llama-3)
  bool fuse_unk = false;       // consecutive unknown characters become one unk token
  int32_t unk_id = -1;         // -1: unknown characters are dropped (as HF does without unk_token)
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // `vocab[id]` is the piece of token `id` (empty for holes). `merges` in rank order.
  // `where` names the source for error messages (file and field).
  static BpeModel with_merges(std::vector<std::string> vocab,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              BpeOptions options, const std::string& where);
  static BpeModel with_scores(std::vector<std::string> vocab, std::vector<float> scores,
                              BpeOptions options, const std::string& where);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Appends the ids of `word` to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_id(std::string_view piece) const;
  const std::string& piece(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  size_t size() const { return vocab_.size(); }

 private:
  BpeModel() = default;
  void build_index(const std::string& where);
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge_by_rank(std::vector<int32_t>& ids) const;
  void merge_by_score(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<float> scores_;  // empty in rank mode
  std::vector<int32_t> byte_ids_;  // <0xXX> -> id, -1 when absent
  BpeOptions options_;

  // word -> ids for short words; encoding prose repeats the same words over and over.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace medtune::tokenizer
