#include "tokenizer/gguf_metadata.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/whole_file.h"
#include "tokenizer/hf_chat_template.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

using nlohmann::json;

// llama_token_type (llama.h), as gguf.TokenType.
constexpr int64_t kNormal = 1;
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;
constexpr int64_t kUnused = 5;

// The Split regexes of the tokenizer.json files llama.cpp knows by name (its llama-vocab.cpp
// pre-tokenizer types), byte for byte as they appear after JSON decoding.
constexpr const char* kLlama3Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

bool is_type(const json& j, const char* type) {
  return j.is_object() && j.value("type", std::string()) == type;
}

// ByteLevel pre-tokenizer step without a prefix space; `use_regex` as required.
bool byte_level(const json& j, bool use_regex) {
  return is_type(j, "ByteLevel") && !j.value("add_prefix_space", false) &&
         j.value("use_regex", true) == use_regex;
}

bool split_isolated(const json& j, const char* regex) {
  return is_type(j, "Split") && j.value("behavior", std::string()) == "Isolated" &&
         !j.value("invert", false) && j.contains("pattern") && j["pattern"].is_object() &&
         j["pattern"].value("Regex", std::string()) == regex;
}

// llama.cpp's name for the pre-tokenizer (what convert_hf_to_gguf.py writes as
// tokenizer.ggml.pre after recognising the tokenizer), or "" when it has none.
std::string llama_cpp_pre_name(const json& pre) {
  if (byte_level(pre, true)) return "gpt-2";
  if (!is_type(pre, "Sequence") || !pre.contains("pretokenizers")) return "";
  const json& s = pre["pretokenizers"];
  if (!s.is_array() || s.size() != 2) return "";
  if (is_type(s[0], "Digits") && s[0].value("individual_digits", false) && byte_level(s[1], true)) {
    return "smollm";
  }
  if (split_isolated(s[0], kLlama3Regex) && byte_level(s[1], false)) return "llama-bpe";
  if (split_isolated(s[0], kQwen2Regex) && byte_level(s[1], false)) return "qwen2";
  return "";
}

// Added tokens that convert_hf_to_gguf.py marks CONTROL although they are not "special"
// (its does_token_look_special).
bool looks_special(const std::string& t) {
  const auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<start_of_", ">") || wrapped("<end_of_", ">");
}

std::string config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

GgufTokenizerMetadata gguf_tokenizer_metadata(const std::string& tokenizer_json, int64_t vocab_size) {
  // Everything medtune cannot tokenize is refused here with the reader's own message.
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_tokenizer_json(tokenizer_json);
  const json root = io::read_json_file(tokenizer_json);
  const std::string& f = tokenizer_json;
  GgufTokenizerMetadata out;

  const json& model = root.at("model");
  if (model.value("type", std::string()) != "BPE" || model.value("byte_fallback", false) ||
      !is_type(root.value("decoder", json()), "ByteLevel")) {
    out.unsupported = f + ": model: not a byte-level BPE vocabulary (SentencePiece-style BPE needs "
                      "per-token scores that tokenizer.json does not hold)";
    return out;
  }
  const json normalizer = root.value("normalizer", json());
  const std::string pre = llama_cpp_pre_name(root.value("pre_tokenizer", json()));
  if (pre.empty()) {
    out.unsupported = f + ": pre_tokenizer: not one llama.cpp knows by name (gpt-2, smollm, llama-bpe, qwen2)";
    return out;
  }
  // Qwen2 ships an NFC normalizer, which llama.cpp's qwen2 pre-tokenizer does not apply either;
  // any other normalizer would change the ids.
  if (!normalizer.is_null() && !(pre == "qwen2" && is_type(normalizer, "NFC"))) {
    out.unsupported = f + ": normalizer: '" + normalizer.value("type", std::string("?")) +
                      "' has no llama.cpp equivalent for pre-tokenizer '" + pre + "'";
    return out;
  }
  if (!normalizer.is_null()) {
    out.notes.push_back(f + ": normalizer NFC: llama.cpp does not apply it (nor does its own "
                        "converter's qwen2 vocabulary), so text that is not in NFC tokenizes differently");
  }

  // Vocabulary by id: model.vocab, then added_tokens (which may also name ids of model.vocab).
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int64_t> types(static_cast<size_t>(vocab_size), kUnused);
  const auto place = [&](int64_t id, const std::string& piece, int64_t type, const std::string& where) {
    if (id < 0 || id >= vocab_size) {
      throw BadInput(f + ": " + where + ": id " + std::to_string(id) + " is outside the model's " +
                     std::to_string(vocab_size) + "-row vocabulary (config.json vocab_size)");
    }
    tokens[static_cast<size_t>(id)] = piece;
    types[static_cast<size_t>(id)] = type;
  };
  for (const auto& [piece, id] : model.at("vocab").items()) place(id.get<int64_t>(), piece, kNormal, "model.vocab");
  if (root.contains("added_tokens")) {
    for (const json& a : root["added_tokens"]) {
      const std::string content = a.at("content").get<std::string>();
      const bool control = a.value("special", false) || looks_special(content);
      if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false)) {
        out.notes.push_back(f + ": added token '" + content + "': lstrip/rstrip/single_word have no GGUF "
                            "key, so llama.cpp matches it literally and text around it may tokenize differently");
      }
      place(a.at("id").get<int64_t>(), content, control ? kControl : kUserDefined, "added_tokens");
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == kUnused) tokens[i] = "[PAD" + std::to_string(i) + "]";
  }

  std::vector<std::string> merges;
  for (const json& m : model.at("merges")) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }

  // What the post-processor adds around a text is what llama.cpp must add too.
  const std::vector<int32_t> around = tok->encode("", true);
  const auto adds = [&](int32_t id) {
    return id >= 0 && std::find(around.begin(), around.end(), id) != around.end();
  };

  const std::filesystem::path dir = std::filesystem::path(f).parent_path();
  const std::filesystem::path cfg_path = dir / "tokenizer_config.json";
  json cfg;
  if (std::filesystem::exists(cfg_path)) cfg = io::read_json_file(cfg_path.string());

  io::GgufMetadata md = {
      {"tokenizer.ggml.model", io::gguf_string("gpt2")},
      {"tokenizer.ggml.pre", io::gguf_string(pre)},
      {"tokenizer.ggml.tokens", io::gguf_string_array(std::move(tokens))},
      {"tokenizer.ggml.token_type", io::gguf_i32_array(std::move(types))},
      {"tokenizer.ggml.merges", io::gguf_string_array(std::move(merges))},
  };
  const auto id_key = [&](const char* key, int32_t id) {
    if (id >= 0) md.push_back({key, io::gguf_u32(static_cast<uint32_t>(id))});
  };
  id_key("tokenizer.ggml.bos_token_id", tok->bos_id());
  id_key("tokenizer.ggml.eos_token_id", tok->eos_id());
  const std::string unk = config_token(cfg, "unk_token");
  id_key("tokenizer.ggml.unknown_token_id", unk.empty() ? -1 : tok->token_id(unk));
  id_key("tokenizer.ggml.padding_token_id", tok->pad_id());
  md.push_back({"tokenizer.ggml.add_bos_token", io::gguf_bool(adds(tok->bos_id()))});
  md.push_back({"tokenizer.ggml.add_eos_token", io::gguf_bool(adds(tok->eos_id()))});

  if (const auto chat = hf_chat_template(dir.string()))
    md.push_back({"tokenizer.chat_template", io::gguf_string(chat->text)});
  out.metadata = std::move(md);
  return out;
}

}  // namespace medtune::tokenizer
