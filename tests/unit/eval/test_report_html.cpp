// The HTML report: the sentences a clinician reads, the guessing warning, escaping of everything
// that comes from data, self-containment, and (when chromium is installed) that it renders.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/metrics.h"
#include "eval/report_html.h"
#include "eval/report_json.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtures = MEDTUNE_SOURCE_DIR "/tests/fixtures/eval/";

json fixture_report(const std::string& run) {
  const Metrics m = compute_metrics(read_predictions_jsonl(kFixtures + run + ".jsonl"), 4);
  return make_report(
      m, {{"model", "TinyLlama-1.1B-Chat <test>"},
          {"adapter", "runs/lora-r16/adapter_model.safetensors"},
          {"data", "tests/fixtures/eval/" + run + ".jsonl"},
          {"data_sha256", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
          {"medtune_version", MEDTUNE_VERSION},
          {"prompt_format", "chat template, letters A-D, zero-shot"},
          {"scoring", "option-letter log-likelihood"},
          {"started_at", "2024-06-11T09:12:03Z"},
          {"duration_s", 412.5},
          {"notes", "<script>alert('x')</script> & \"quotes\""}});
}

TEST(HtmlReport, HeadlineSentenceAndGuessingWarning) {
  const std::string weak = render_html_report(fixture_report("run_a"));
  // run_a: 70/200, Wilson 28.7-41.8%, always answering B (61/200) scores 30.5%.
  EXPECT_NE(weak.find("The model chose the right answer in 70 of 200 questions (35.0%, 95% CI "
                      "28.7\u201341.8%). "
                      "Always answering the most common letter (B) would score 30.5%"),
            std::string::npos);
  EXPECT_NE(weak.find("Not distinguishable from guessing."), std::string::npos);
  const std::string strong = render_html_report(fixture_report("run_b"));
  EXPECT_NE(strong.find("The model chose the right answer in 137 of 200 questions (68.5%, 95% CI "
                        "61.8\u201374.5%)."),
            std::string::npos);
  EXPECT_EQ(strong.find("guessing."), std::string::npos);
  EXPECT_NE(strong.find("acc_norm"), std::string::npos);
  EXPECT_NE(strong.find("step2&amp;3"), std::string::npos);  // meta_info, escaped
  EXPECT_NE(strong.find("ECE "), std::string::npos);
}

TEST(HtmlReport, WorseThanGuessingHasItsOwnBanner) {
  json report = fixture_report("run_a");
  report["metrics"]["accuracy"] = {
      {"correct", 40}, {"n", 200}, {"value", 0.2}, {"ci95", {{"lo", 0.15}, {"hi", 0.26}}}};
  const std::string html = render_html_report(report);
  EXPECT_NE(html.find("Worse than guessing."), std::string::npos);
  EXPECT_NE(html.find("banner bad"), std::string::npos);
}

TEST(HtmlReport, EscapesDataAndIsSelfContained) {
  const std::string html = render_html_report(fixture_report("run_a"));
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quotes&quot;"),
            std::string::npos);
  EXPECT_NE(html.find("TinyLlama-1.1B-Chat &lt;test&gt;"), std::string::npos);
  for (const char* external :
       {"http://", "https://", "<link", "@import", "url(", "<img", "<iframe"})
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

TEST(HtmlReport, MissingMetricIsBadInputNamingTheField) {
  json report = fixture_report("run_a");
  report["metrics"].erase("letter_prior");
  try {
    render_html_report(report);
    FAIL() << "no error";
  } catch (const BadInput& e) {
    EXPECT_STREQ(e.what(), "report: missing field 'metrics.letter_prior'");
  }
  report = fixture_report("run_a");
  report["metrics"]["accuracy"]["correct"] = "70";
  EXPECT_THROW(render_html_report(report), BadInput);
}

// Big-endian 32-bit integer at `at`.
uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Renders the weak run's report (the one with every element: banner, both charts, acc_norm-free
// headline) to <build>/eval_report_fixture.html and screenshots it with headless chromium into
// eval_report_fixture.png, where a person can look at it.
TEST(HtmlReportScreenshotSlow, ChromiumRendersTheReport) {
  const std::string html_path = MEDTUNE_BINARY_DIR "/eval_report_fixture.html";
  const std::string png_path = MEDTUNE_BINARY_DIR "/eval_report_fixture.png";
  std::ofstream(html_path) << render_html_report(fixture_report("run_a"));
  if (std::system("command -v chromium >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "chromium not installed";
  fs::remove(png_path);
  const fs::path profile = medtune::testing::scratch_dir("eval_chromium");
  // A private profile directory: chromium refuses to share one between concurrent runs.
  const std::string cmd =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--user-data-dir=" +
      profile.string() + " --screenshot=" + png_path + " --window-size=1200,1600 file://" +
      html_path + " >" + profile.string() + ".log 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << " (log: " << profile.string() << ".log)";
  std::ifstream in(png_path, std::ios::binary);
  ASSERT_TRUE(in) << "no screenshot at " << png_path;
  std::string png(fs::file_size(png_path), '\0');
  in.read(png.data(), static_cast<std::streamsize>(png.size()));
  ASSERT_GE(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 1200u);  // width
  EXPECT_EQ(be32(png, 20), 1600u);  // height
  // A blank or single-colour 1200x1600 page compresses to a few KB; text and charts do not.
  EXPECT_GT(png.size(), 40u * 1024u);
}

}  // namespace
}  // namespace medtune::eval
