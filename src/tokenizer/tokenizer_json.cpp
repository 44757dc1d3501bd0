// Tokenizer::from_tokenizer_json: reads a Hugging Face tokenizer.json into a TokenizerSpec.
// Every component type we do not implement is rejected with a BadInput naming the JSON path,
// so that an unsupported tokenizer fails loudly instead of producing different ids.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/whole_file.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

using nlohmann::json;

struct Ctx {
  std::string file;
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw BadInput(file + ": " + where + ": " + what);
  }
};

const json& need(const Ctx& c, const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) c.fail(where, std::string("missing field '") + key + "'");
  return j.at(key);
}

template <typename T>
T get_or(const Ctx& c, const json& j, const char* key, T fallback, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    c.fail(where + "." + key, std::string("wrong type: ") + e.what());
  }
}

std::string type_of(const Ctx& c, const json& j, const std::string& where) {
  const json& t = need(c, j, "type", where);
  if (!t.is_string()) c.fail(where + ".type", "not a string");
  return t.get<std::string>();
}

// {"String": " "} or {"Regex": "..."}: returns the regex (a literal is escaped).
std::shared_ptr<Regex> pattern_regex(const Ctx& c, const json& p, const std::string& where) {
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    return std::make_shared<Regex>(p["Regex"].get<std::string>(), c.file + ": " + where);
  }
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    return std::make_shared<Regex>(regex_escape(p["String"].get<std::string>()), c.file + ": " + where);
  }
  c.fail(where, "expected {\"String\": ...} or {\"Regex\": ...}");
}

void add_normalizer(const Ctx& c, const json& j, const std::string& where, Normalizer& out) {
  if (j.is_null()) return;
  const std::string type = type_of(c, j, where);
  if (type == "Sequence") {
    const json& list = need(c, j, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add_normalizer(c, list[i], where + ".normalizers[" + std::to_string(i) + "]", out);
    }
  } else if (type == "Prepend") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::Prepend;
    s.text = need(c, j, "prepend", where).get<std::string>();
    out.add(std::move(s));
  } else if (type == "Replace") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::Replace;
    const json& p = need(c, j, "pattern", where);
    if (p.is_object() && p.contains("String")) {
      s.text = p["String"].get<std::string>();
    } else {
      s.regex = pattern_regex(c, p, where + ".pattern");
    }
    s.content = need(c, j, "content", where).get<std::string>();
    out.add(std::move(s));
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::Unicode;
    s.form = type == "NFC" ? UnicodeForm::NFC : type == "NFD" ? UnicodeForm::NFD
           : type == "NFKC" ? UnicodeForm::NFKC : UnicodeForm::NFKD;
    out.add(std::move(s));
  } else if (type == "Lowercase" || type == "StripAccents" || type == "Nmt") {
    NormalizerStep s;
    s.kind = type == "Lowercase" ? NormalizerStep::Kind::Lowercase
           : type == "Nmt" ? NormalizerStep::Kind::Nmt : NormalizerStep::Kind::StripAccents;
    out.add(std::move(s));
  } else if (type == "Strip") {
    NormalizerStep s;
    s.kind = NormalizerStep::Kind::Strip;
    s.strip_left = need(c, j, "strip_left", where).get<bool>();
    s.strip_right = need(c, j, "strip_right", where).get<bool>();
    out.add(std::move(s));
  } else if (type == "Precompiled") {
    c.fail(where, "normalizer type 'Precompiled' (a SentencePiece precompiled_charsmap, as in T5, ALBERT or "
                  "XLM-R tokenizers) is not supported by medtune");
  } else {
    c.fail(where, "normalizer type '" + type + "' is not supported by medtune");
  }
}

SplitBehavior parse_behavior(const Ctx& c, const std::string& b, const std::string& where) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  c.fail(where, "unknown split behavior '" + b + "'");
}

PreTokenizerStep::Prepend parse_prepend_scheme(const Ctx& c, const json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PreTokenizerStep::Prepend::Always;
    if (s == "first") return PreTokenizerStep::Prepend::First;
    if (s == "never") return PreTokenizerStep::Prepend::Never;
    c.fail(where + ".prepend_scheme", "unknown value '" + s + "'");
  }
  // Files written before prepend_scheme existed carry add_prefix_space.
  return get_or<bool>(c, j, "add_prefix_space", true, where) ? PreTokenizerStep::Prepend::Always
                                                             : PreTokenizerStep::Prepend::Never;
}

void add_pre_tokenizer(const Ctx& c, const json& j, const std::string& where, PreTokenizer& out) {
  if (j.is_null()) return;
  const std::string type = type_of(c, j, where);
  PreTokenizerStep s;
  if (type == "Sequence") {
    const json& list = need(c, j, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add_pre_tokenizer(c, list[i], where + ".pretokenizers[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    s.regex = pattern_regex(c, need(c, j, "pattern", where), where + ".pattern");
    s.behavior = parse_behavior(c, need(c, j, "behavior", where).get<std::string>(), where + ".behavior");
    s.invert = get_or<bool>(c, j, "invert", false, where);
  } else if (type == "Digits") {
    // Rust's char::is_numeric is the N* categories, i.e. \p{N}.
    s.kind = PreTokenizerStep::Kind::Split;
    s.regex = std::make_shared<Regex>(R"(\p{N})", c.file + ": " + where);
    s.behavior = get_or<bool>(c, j, "individual_digits", false, where) ? SplitBehavior::Isolated
                                                                       : SplitBehavior::Contiguous;
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = get_or<bool>(c, j, "add_prefix_space", true, where);
    if (get_or<bool>(c, j, "use_regex", true, where)) {
      s.regex = std::make_shared<Regex>(kGpt2Pattern, c.file + ": " + where);
    }
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.replacement = get_or<std::string>(c, j, "replacement", "\xE2\x96\x81", where);
    s.prepend = parse_prepend_scheme(c, j, where);
    s.split = get_or<bool>(c, j, "split", true, where);
    s.regex = std::make_shared<Regex>(regex_escape(s.replacement), c.file + ": " + where);
  } else {
    c.fail(where, "pre-tokenizer type '" + type + "' is not supported by medtune");
  }
  out.add(std::move(s));
}

void add_decoder(const Ctx& c, const json& j, const std::string& where, Decoder& out) {
  if (j.is_null()) return;
  const std::string type = type_of(c, j, where);
  DecoderStep s;
  if (type == "Sequence") {
    const json& list = need(c, j, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add_decoder(c, list[i], where + ".decoders[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::Replace;
    const json& p = need(c, j, "pattern", where);
    if (p.is_object() && p.contains("String")) {
      s.pattern = p["String"].get<std::string>();
    } else {
      s.regex = pattern_regex(c, p, where + ".pattern");
    }
    s.content = need(c, j, "content", where).get<std::string>();
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::Strip;
    s.content = need(c, j, "content", where).get<std::string>();
    s.start = get_or<size_t>(c, j, "start", 0, where);
    s.stop = get_or<size_t>(c, j, "stop", 0, where);
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::Metaspace;
    s.replacement = get_or<std::string>(c, j, "replacement", "\xE2\x96\x81", where);
    s.prepend = parse_prepend_scheme(c, j, where) != PreTokenizerStep::Prepend::Never;
  } else {
    c.fail(where, "decoder type '" + type + "' is not supported by medtune");
  }
  out.add(std::move(s));
}

// TemplateProcessing "single": special tokens before "$A" go to prefix_ids, after it to suffix_ids.
void add_post_processor(const Ctx& c, const json& j, const std::string& where, TokenizerSpec& spec) {
  if (j.is_null()) return;
  const std::string type = type_of(c, j, where);
  if (type == "Sequence") {
    const json& list = need(c, j, "processors", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add_post_processor(c, list[i], where + ".processors[" + std::to_string(i) + "]", spec);
    }
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const json& single = need(c, j, "single", where);
    const json& specials = need(c, j, "special_tokens", where);
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string w = where + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = need(c, item["SpecialToken"], "id", w).get<std::string>();
        if (!specials.contains(name)) c.fail(w, "special token '" + name + "' not in special_tokens");
        for (const auto& id : need(c, specials[name], "ids", where + ".special_tokens." + name)) {
          (seen_sequence ? spec.suffix_ids : spec.prefix_ids).push_back(id.get<int32_t>());
        }
      } else {
        c.fail(w, "expected Sequence or SpecialToken");
      }
    }
  } else {
    c.fail(where, "post-processor type '" + type + "' is not supported by medtune");
  }
}

std::unique_ptr<BpeModel> read_model(const Ctx& c, const json& m) {
  const std::string where = "model";
  const std::string type = m.contains("type") ? m["type"].get<std::string>() : "BPE";
  if (type != "BPE") c.fail(where + ".type", "model type '" + type + "' is not supported by medtune");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) {
    c.fail(where + ".dropout", "BPE dropout is random; medtune only encodes deterministically");
  }
  const json& vocab = need(c, m, "vocab", where);
  if (!vocab.is_object()) c.fail(where + ".vocab", "not an object");
  std::vector<std::string> pieces;
  for (const auto& [piece, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > 100000000) c.fail(where + ".vocab", "id " + std::to_string(id) + " of '" + piece + "' out of range");
    if (pieces.size() <= static_cast<size_t>(id)) pieces.resize(static_cast<size_t>(id) + 1);
    pieces[static_cast<size_t>(id)] = piece;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const json& mj = need(c, m, "merges", where);
  merges.reserve(mj.size());
  for (size_t i = 0; i < mj.size(); ++i) {
    const json& e = mj[i];
    if (e.is_array() && e.size() == 2) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        c.fail(where + ".merges[" + std::to_string(i) + "]", "expected two pieces separated by one space");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      c.fail(where + ".merges[" + std::to_string(i) + "]", "expected a string or a pair");
    }
  }
  BpeOptions o;
  o.byte_fallback = get_or<bool>(c, m, "byte_fallback", false, where);
  o.ignore_merges = get_or<bool>(c, m, "ignore_merges", false, where);
  o.fuse_unk = get_or<bool>(c, m, "fuse_unk", false, where);
  o.continuing_subword_prefix = get_or<std::string>(c, m, "continuing_subword_prefix", "", where);
  o.end_of_word_suffix = get_or<std::string>(c, m, "end_of_word_suffix", "", where);
  const std::string unk = get_or<std::string>(c, m, "unk_token", "", where);
  if (!unk.empty()) {
    const auto it = std::find(pieces.begin(), pieces.end(), unk);
    if (it == pieces.end()) c.fail(where + ".unk_token", "'" + unk + "' is not in the vocabulary");
    o.unk_id = static_cast<int32_t>(it - pieces.begin());
  }
  return std::make_unique<BpeModel>(
      BpeModel::with_merges(std::move(pieces), merges, std::move(o), c.file + ": model"));
}

// bos/eos/pad names from tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path) {
  Ctx c{path};
  const json root = io::read_json_file(path);
  TokenizerSpec spec;
  spec.source = path;
  try {
    spec.model = read_model(c, need(c, root, "model", "root"));
    if (root.contains("added_tokens")) {
      const json& list = root["added_tokens"];
      for (size_t i = 0; i < list.size(); ++i) {
        const json& a = list[i];
        const std::string w = "added_tokens[" + std::to_string(i) + "]";
        AddedToken t;
        t.id = need(c, a, "id", w).get<int32_t>();
        t.content = need(c, a, "content", w).get<std::string>();
        if (t.content.empty()) c.fail(w + ".content", "empty");
        t.special = get_or<bool>(c, a, "special", false, w);
        t.single_word = get_or<bool>(c, a, "single_word", false, w);
        t.lstrip = get_or<bool>(c, a, "lstrip", false, w);
        t.rstrip = get_or<bool>(c, a, "rstrip", false, w);
        t.normalized = get_or<bool>(c, a, "normalized", !t.special, w);
        spec.added_tokens.push_back(std::move(t));
      }
    }
    add_normalizer(c, root.value("normalizer", json()), "normalizer", spec.normalizer);
    add_pre_tokenizer(c, root.value("pre_tokenizer", json()), "pre_tokenizer", spec.pre_tokenizer);
    add_decoder(c, root.value("decoder", json()), "decoder", spec.decoder);
    add_post_processor(c, root.value("post_processor", json()), "post_processor", spec);
  } catch (const json::exception& e) {
    throw BadInput(path + ": unexpected JSON content: " + e.what());
  }
  // Without a tokenizer_config.json, the post-processor's leading token is the best BOS guess.
  if (!spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
  auto tok = std::make_unique<Tokenizer>(std::move(spec));

  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const json cfg = io::read_json_file(config_path.string());
    auto lookup = [&](const char* key) {
      const std::string name = config_token(cfg, key);
      if (name.empty()) return -1;
      const int32_t id = tok->token_id(name);
      if (id < 0) throw BadInput(config_path.string() + ": " + key + " '" + name + "' is not in the vocabulary");
      return id;
    };
    tok->spec_.bos_id = lookup("bos_token");
    tok->spec_.eos_id = lookup("eos_token");
    tok->spec_.pad_id = lookup("pad_token");
  }
  return tok;
}

}  // namespace medtune::tokenizer
