// One Jinja feature per case against jinja2 as transformers configures it
// (tests/fixtures/chat_templates/features.json, from tools/make_chat_template_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace medtune::tokenizer::jinja {
namespace {

Value from_json(const nlohmann::ordered_json& j) {
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value(j.get<bool>());
  if (j.is_number_integer()) return Value(j.get<std::int64_t>());
  if (j.is_number()) return Value(j.get<double>());
  if (j.is_string()) return Value(j.get<std::string>());
  if (j.is_array()) {
    List l;
    for (const auto& x : j) l.push_back(from_json(x));
    return Value(std::move(l));
  }
  Dict d;
  for (const auto& [k, v] : j.items()) d.set(k, from_json(v));
  return Value(std::move(d));
}

std::string render(const std::string& source, const nlohmann::ordered_json& context) {
  const std::string normalized = normalize_template_source(source);
  const Body body = parse_template(lex_template(normalized, "feature"), "feature");
  const Value ctx = from_json(context);
  return render_template(body, ctx.as_dict(), "feature");
}

TEST(ChatTemplateFeatures, EveryFeatureMatchesJinja2) {
  std::ifstream in(std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/chat_templates/features.json");
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  // nlohmann keeps object keys sorted by default; dict order matters for printing and tojson.
  const auto cases = nlohmann::ordered_json::parse(ss.str());
  int passed = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    if (c.contains("expected")) {
      try {
        const std::string got = render(c["template"], c["context"]);
        EXPECT_EQ(got, c["expected"].get<std::string>());
        if (got == c["expected"].get<std::string>()) ++passed;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
      }
    } else {
      EXPECT_THROW(render(c["template"], c["context"]), BadInput);
      ++passed;
    }
  }
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace medtune::tokenizer::jinja
