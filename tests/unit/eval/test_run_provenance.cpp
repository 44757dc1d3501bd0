// Provenance of an evaluation report: file digests, the command line, and how the HTML shows them.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/metrics.h"
#include "eval/report_html.h"
#include "eval/report_json.h"
#include "eval/run_provenance.h"

namespace medtune::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// SHA-256("abc"), FIPS 180-2 appendix B.1.
constexpr const char* kAbcSha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("medtune_prov_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(RunProvenance, FileDigestsAreAbsoluteWithSizeAndSha256) {
  const fs::path d = temp_dir("digest");
  std::ofstream(d / "data.jsonl") << "abc";
  const json j = file_digests_json({(d / "data.jsonl").string()});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("sha256"), kAbcSha256);
  EXPECT_EQ(j[0].at("bytes"), 3);
  EXPECT_TRUE(fs::path(j[0].at("path").get<std::string>()).is_absolute());
  EXPECT_THROW(file_digests_json({(d / "missing.jsonl").string()}), BadInput);
  fs::remove_all(d);
}

TEST(RunProvenance, AdapterFilesAreTheOnesMedtuneReads) {
  const fs::path d = temp_dir("adapter");
  std::ofstream(d / "adapter_config.json") << "{}";
  std::ofstream(d / "adapter_model.safetensors") << "x";
  std::ofstream(d / "README.md") << "not read";
  const auto files = adapter_files(d.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "adapter_config.json");
  EXPECT_EQ(fs::path(files[1]).filename(), "adapter_model.safetensors");
  EXPECT_THROW(adapter_files((d / "nope").string()), BadInput);
  fs::remove_all(d);
}

TEST(RunProvenance, CommandLineIsThisProcessShellQuoted) {
  const std::string cmd = process_command_line();
  EXPECT_NE(cmd.find("test_eval"), std::string::npos) << cmd;
  EXPECT_EQ(shell_quote("--data"), "--data");
  EXPECT_EQ(shell_quote("/a/b.jsonl"), "/a/b.jsonl");
  EXPECT_EQ(shell_quote("You are a clinician"), "'You are a clinician'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(RunProvenance, HtmlShowsEachFileDigestOnItsOwnLine) {
  QuestionResult r;
  r.id = "q1";
  r.gold = 0;
  r.pred = 0;
  r.option_logprobs = {-0.1, -3, -3, -3};
  r.option_probs = {0.85, 0.05, 0.05, 0.05};
  const json report = make_report(
      compute_metrics({r}, 4),
      {{"model_files", json::array({json{{"path", "/m/model.gguf"}, {"bytes", 3}, {"sha256", kAbcSha256}}})},
       {"data_files", json::array({json{{"path", "/d/dev<1>.jsonl"}, {"bytes", 7}, {"sha256", "00ff"}},
                                   json{{"path", "/d/pool.jsonl"}, {"bytes", 9}, {"sha256", "11ee"}}})},
       {"command_line", "medtune eval m.gguf --data 'a b.jsonl'"},
       {"threads", 2},
       {"medtune_version", MEDTUNE_VERSION}});
  const std::string html = render_html_report(report);
  EXPECT_NE(html.find("<h2>Provenance</h2>"), std::string::npos);
  EXPECT_NE(html.find(std::string(kAbcSha256) + "&nbsp; /m/model.gguf (3 bytes)"), std::string::npos);
  EXPECT_NE(html.find("00ff&nbsp; /d/dev&lt;1&gt;.jsonl (7 bytes)<br>11ee&nbsp; /d/pool.jsonl (9 bytes)"),
            std::string::npos);
  EXPECT_NE(html.find("medtune eval m.gguf --data &#39;a b.jsonl&#39;"), std::string::npos);
  EXPECT_NE(html.find("<td>threads</td><td>2</td>"), std::string::npos);
}

}  // namespace
}  // namespace medtune::eval
