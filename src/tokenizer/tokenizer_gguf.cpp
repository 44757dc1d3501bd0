// Tokenizer::from_gguf: builds the tokenizer that Hugging Face transformers builds from a GGUF
// file's tokenizer.ggml.* metadata (and that llama.cpp runs):
//   model "gpt2"  -> byte-level BPE with tokenizer.ggml.merges, pre-tokenizer chosen by
//                    tokenizer.ggml.pre, ByteLevel decoder;
//   model "llama" -> SentencePiece BPE: merges by tokenizer.ggml.scores, byte fallback,
//                    "▁" for spaces (plus a leading "▁" when add_space_prefix), Llama-2 decoder.
// Control (3), user-defined (4) and unknown (2) tokens are matched in text as added tokens.
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;
const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

void add_split(PreTokenizer& pre, const char* pattern, const std::string& where) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Kind::Split;
  s.regex = std::make_shared<Regex>(pattern, where);
  s.behavior = SplitBehavior::Isolated;
  pre.add(std::move(s));
}

void add_byte_level(PreTokenizer& pre, bool use_gpt2_regex, const std::string& where) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Kind::ByteLevel;
  if (use_gpt2_regex) s.regex = std::make_shared<Regex>(kGpt2Pattern, where);
  pre.add(std::move(s));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const io::GgufFile& gguf) {
  const std::string& file = gguf.path();
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  const size_t n = tokens.size();
  if (n == 0) throw BadInput(file + ": metadata key 'tokenizer.ggml.tokens' is empty");
  std::vector<int64_t> types;
  if (gguf.has("tokenizer.ggml.token_type")) {
    types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      throw BadInput(file + ": metadata key 'tokenizer.ggml.token_type' has " + std::to_string(types.size()) +
                     " entries for " + std::to_string(n) + " tokens");
    }
  }
  auto id_key = [&](const char* key) -> int32_t {
    const int64_t id = gguf.get_int_or(key, -1);
    if (id >= static_cast<int64_t>(n)) {
      throw BadInput(file + ": metadata key '" + key + "' = " + std::to_string(id) + " is outside the " +
                     std::to_string(n) + "-token vocabulary");
    }
    return static_cast<int32_t>(id);
  };

  TokenizerSpec spec;
  spec.source = file;
  spec.bos_id = id_key("tokenizer.ggml.bos_token_id");
  spec.eos_id = id_key("tokenizer.ggml.eos_token_id");
  spec.pad_id = id_key("tokenizer.ggml.padding_token_id");
  const int32_t unk_id = id_key("tokenizer.ggml.unknown_token_id");

  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != kTypeControl && types[i] != kTypeUserDefined && types[i] != kTypeUnknown) continue;
    if (tokens[i].empty()) continue;
    AddedToken t;
    t.id = static_cast<int32_t>(i);
    t.content = tokens[i];
    t.special = types[i] != kTypeUserDefined;
    spec.added_tokens.push_back(std::move(t));
  }

  bool add_bos_default = false;
  const std::string where = file + ": tokenizer.ggml";
  if (model == "gpt2") {
    const auto& merge_lines = gguf.get_string_array("tokenizer.ggml.merges");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merge_lines.size());
    for (size_t i = 0; i < merge_lines.size(); ++i) {
      const std::string& s = merge_lines[i];
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size()) {
        throw BadInput(file + ": metadata key 'tokenizer.ggml.merges'[" + std::to_string(i) +
                       "] = '" + s + "' is not two pieces separated by a space");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
    const std::string pre = gguf.get_string_or("tokenizer.ggml.pre", "default");
    BpeOptions o;
    o.unk_id = -1;  // byte-level vocabularies cover every byte
    if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
      add_byte_level(spec.pre_tokenizer, true, where + ".pre");
    } else if (pre == "smollm") {
      // SmolLM2's tokenizer.json: Sequence[Digits(individual_digits), ByteLevel].
      add_split(spec.pre_tokenizer, R"(\p{N})", where + ".pre");
      add_byte_level(spec.pre_tokenizer, true, where + ".pre");
    } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
      add_split(spec.pre_tokenizer, kLlama3Pattern, where + ".pre");
      add_byte_level(spec.pre_tokenizer, false, where + ".pre");
      o.ignore_merges = true;
    } else if (pre == "qwen2") {
      add_split(spec.pre_tokenizer, kQwen2Pattern, where + ".pre");
      add_byte_level(spec.pre_tokenizer, false, where + ".pre");
    } else {
      throw BadInput(file + ": metadata key 'tokenizer.ggml.pre' = '" + pre +
                     "' is not supported by medtune (supported: default, gpt2, smollm, llama-bpe, qwen2)");
    }
    spec.model = std::make_unique<BpeModel>(
        BpeModel::with_merges(std::move(tokens), merges, std::move(o), where + ".merges"));
    DecoderStep d;
    d.kind = DecoderStep::Kind::ByteLevel;
    spec.decoder.add(std::move(d));
  } else if (model == "llama") {
    const std::vector<double> scores64 = gguf.get_float_array("tokenizer.ggml.scores");
    std::vector<float> scores(scores64.begin(), scores64.end());
    const bool space_prefix = gguf.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    if (space_prefix) spec.normalizer.add({NormalizerStep::Kind::Prepend, kSpace, "", nullptr});
    spec.normalizer.add({NormalizerStep::Kind::Replace, " ", kSpace, nullptr});
    BpeOptions o;
    o.byte_fallback = true;
    o.unk_id = unk_id;
    spec.model = std::make_unique<BpeModel>(
        BpeModel::with_scores(std::move(tokens), std::move(scores), std::move(o), where + ".scores"));
    DecoderStep replace;
    replace.kind = DecoderStep::Kind::Replace;
    replace.pattern = kSpace;
    replace.content = " ";
    spec.decoder.add(std::move(replace));
    DecoderStep fallback;
    fallback.kind = DecoderStep::Kind::ByteFallback;
    spec.decoder.add(std::move(fallback));
    DecoderStep fuse;
    fuse.kind = DecoderStep::Kind::Fuse;
    spec.decoder.add(std::move(fuse));
    if (space_prefix) {
      DecoderStep strip;
      strip.kind = DecoderStep::Kind::Strip;
      strip.content = " ";
      strip.start = 1;
      spec.decoder.add(std::move(strip));
    }
    add_bos_default = true;
  } else {
    throw BadInput(file + ": metadata key 'tokenizer.ggml.model' = '" + model +
                   "' is not supported by medtune (supported: gpt2, llama)");
  }

  if (gguf.get_bool_or("tokenizer.ggml.add_bos_token", add_bos_default) && spec.bos_id >= 0) {
    spec.prefix_ids.push_back(spec.bos_id);
  }
  if (gguf.get_bool_or("tokenizer.ggml.add_eos_token", false) && spec.eos_id >= 0) {
    spec.suffix_ids.push_back(spec.eos_id);
  }
  return std::make_unique<Tokenizer>(std::move(spec));
}

}  // namespace medtune::tokenizer
