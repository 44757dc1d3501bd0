// Helpers shared by the tokenizer tests: fixture paths, hex, and the expected-ids JSON files
// written by tools/make_tokenizer_fixtures.py (ids from Hugging Face tokenizers).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace medtune::tokenizer::testing {

inline std::string fixture_path(const std::string& name) {
  return std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

struct StressCase {
  std::string name;
  std::string input;      // raw bytes, possibly invalid UTF-8
  std::string sanitized;  // Python's bytes.decode("utf-8", "replace"), re-encoded
  std::vector<int32_t> ids;          // add_special_tokens = False
  std::vector<int32_t> ids_special;  // add_special_tokens = True
  std::string decoded;               // decode(ids)
  std::string decoded_skip;          // decode(ids, skip_special_tokens = True)
};

inline std::vector<StressCase> load_stress(const std::string& file) {
  std::ifstream in(fixture_path(file));
  if (!in) throw std::runtime_error("missing fixture " + fixture_path(file));
  const auto j = nlohmann::json::parse(in);
  std::vector<StressCase> out;
  for (const auto& c : j.at("cases")) {
    StressCase s;
    s.name = c.at("name").get<std::string>();
    s.input = from_hex(c.at("hex").get<std::string>());
    s.sanitized = from_hex(c.at("sanitized_hex").get<std::string>());
    s.ids = c.at("ids").get<std::vector<int32_t>>();
    s.ids_special = c.at("ids_special").get<std::vector<int32_t>>();
    s.decoded = c.at("decoded").get<std::string>();
    s.decoded_skip = c.at("decoded_skip").get<std::string>();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace medtune::tokenizer::testing
