// Stop strings over streamed tokens, with SmolLM2's real tokenizer: the text is cut before the
// first stop string, and no prefix of a stop string is shown before it is known not to complete.
#include <gtest/gtest.h>

#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace medtune::tokenizer {
namespace {

std::unique_ptr<Tokenizer> smollm2() {
  return Tokenizer::from_tokenizer_json(std::string(MEDTUNE_SOURCE_DIR) +
                                                  "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
}

// Pushes every token of `text`; returns what was shown token by token, and the whole.
std::vector<std::string> run(const Tokenizer& tok, const std::string& text,
                             const std::vector<std::string>& stops, std::string& all, bool& stopped) {
  TextStream s(tok, stops);
  std::vector<std::string> shown;
  all.clear();
  for (int32_t id : tok.encode(text, false)) {
    shown.push_back(s.push(id));
    all += shown.back();
  }
  all += s.finish();
  stopped = s.stopped();
  return shown;
}

TEST(TextStream, WithoutStopsShowsEverything) {
  const auto tok = smollm2();
  std::string all;
  bool stopped = false;
  run(*tok, "The heart has four chambers. Zürich ✓", {}, all, stopped);
  EXPECT_EQ(all, "The heart has four chambers. Zürich ✓");
  EXPECT_FALSE(stopped);
}

TEST(TextStream, CutsBeforeTheEarliestStopString) {
  const auto tok = smollm2();
  std::string all;
  bool stopped = false;
  run(*tok, "Answer: B. Explanation: metformin", {"Explanation", ". E"}, all, stopped);
  EXPECT_EQ(all, "Answer: B");
  EXPECT_TRUE(stopped);
}

TEST(TextStream, NamesTheStopStringItCutAt) {
  const auto tok = smollm2();
  TextStream s(*tok, {"Explanation", ". E"});
  std::string all;
  for (int32_t id : tok->encode("Answer: B. Explanation: metformin", false)) all += s.push(id);
  all += s.finish();
  EXPECT_EQ(all, "Answer: B");
  EXPECT_EQ(s.stopped_at(), ". E");  // ". E" begins before "Explanation" does
}

TEST(TextStream, HoldsBackAPossibleStopPrefixThenReleasesIt) {
  const auto tok = smollm2();
  std::string all;
  bool stopped = false;
  const auto shown = run(*tok, "one two three four", {"two thr33"}, all, stopped);
  EXPECT_EQ(all, "one two three four");
  EXPECT_FALSE(stopped);
  // While streaming, the text shown never ends in a beginning of the stop string ("t", "two",
  // "two thr"...): that tail is held back until the next token shows it is not the stop string.
  const std::string stop = "two thr33";
  std::string so_far;
  for (const auto& piece : shown) {
    so_far += piece;
    for (size_t k = 1; k < stop.size() && k <= so_far.size(); ++k)
      EXPECT_NE(so_far.compare(so_far.size() - k, k, stop, 0, k), 0) << "'" << so_far << "' ends in '" << stop.substr(0, k) << "'";
  }
}

TEST(TextStream, AStopStringThatIsTheWholeTextLeavesNothing) {
  const auto tok = smollm2();
  std::string all;
  bool stopped = false;
  run(*tok, "STOP here", {"STOP"}, all, stopped);
  EXPECT_EQ(all, "");
  EXPECT_TRUE(stopped);
}

}  // namespace
}  // namespace medtune::tokenizer
