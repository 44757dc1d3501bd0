// report.html of a training run: metrics.jsonl read into curves (resumed logs, gaps, bad lines
// named by file and line), chart geometry, escaping of everything from the run, self-containment,
// the status, the training runs behind two eval runs (comparison.html), and (when chromium is
// installed) that the curves are really drawn.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/training_comparison.h"
#include "eval/training_curves.h"
#include "eval/training_report.h"
#include "support/scratch_dir.h"

namespace medtune::eval {
namespace {

namespace fs = std::filesystem;

std::string write_metrics(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("medtune_test_training_report_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string step_line(int step, double loss) {
  return "{\"step\":" + std::to_string(step) + ",\"epoch\":0.5,\"loss\":" + std::to_string(loss) +
         ",\"lr\":0.001,\"grad_norm\":0.5,\"tokens_per_s\":1000.0,\"elapsed_s\":1.0,\"rss_bytes\":104857600}\n";
}

// 30 logged steps with a falling loss, evaluations every 10 (loss and accuracy).
std::string synthetic_run(bool finished) {
  std::string s = "{\"eval\":{\"step\":0,\"loss\":3.0,\"tokens\":40,\"accuracy\":0.25}}\n";
  for (int step = 1; step <= 30; ++step) {
    s += step_line(step, 3.0 - 0.05 * step);
    if (step % 10 == 0)
      s += "{\"eval\":{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(3.0 - 0.04 * step) +
           ",\"tokens\":40,\"accuracy\":" + std::to_string(0.25 + 0.01 * step) + "}}\n";
  }
  if (finished) s += "{\"summary\":{\"steps\":30,\"stop_reason\":\"completed\"}}\n";
  return s;
}

TEST(TrainingCurves, ReadsStepsEvaluationsAndStatus) {
  const TrainingCurves c = read_training_curves(write_metrics("run.jsonl", synthetic_run(true)));
  ASSERT_EQ(c.loss.size(), 30u);
  EXPECT_EQ(c.loss.front(), (std::pair<int64_t, double>{1, 2.95}));
  EXPECT_EQ(c.rss_mib.back(), (std::pair<int64_t, double>{30, 100.0}));  // 104857600 bytes
  EXPECT_EQ(c.eval_loss.size(), 4u);
  EXPECT_EQ(c.eval_accuracy.back(), (std::pair<int64_t, double>{30, 0.55}));
  EXPECT_EQ(run_status(c), "finished");
  EXPECT_EQ(run_status(read_training_curves(write_metrics("live.jsonl", synthetic_run(false)))), "running");
  EXPECT_EQ(run_status(read_training_curves(
                write_metrics("stop.jsonl", step_line(1, 2.0) + "{\"summary\":{\"stop_reason\":\"signal\"}}\n"))),
            "stopped (signal)");
}

TEST(TrainingCurves, ALaterLogOfAStepReplacesWhatFollowedIt) {
  // Steps 1-3 logged, then a resume from step 1's checkpoint logs 2-3 again; a NaN loss (null)
  // leaves a gap; an accuracy-only evaluation (0 tokens) has no loss.
  const std::string text = step_line(1, 2.0) + step_line(2, 1.9) + step_line(3, 1.8) +
                           "{\"eval\":{\"step\":3,\"loss\":0.0,\"tokens\":0,\"accuracy\":0.5}}\n" + step_line(2, 1.5) +
                           "{\"step\":3,\"loss\":null,\"lr\":0.001}\n";
  const TrainingCurves c = read_training_curves(write_metrics("resumed.jsonl", text));
  EXPECT_EQ(c.loss, (CurvePoints{{1, 2.0}, {2, 1.5}}));
  EXPECT_EQ(c.learning_rate, (CurvePoints{{1, 0.001}, {2, 0.001}, {3, 0.001}}));
  EXPECT_TRUE(c.eval_loss.empty());
  EXPECT_EQ(c.eval_accuracy, (CurvePoints{{3, 0.5}}));
}

TEST(TrainingCurves, BadLinesAreNamedByFileLineAndField) {
  const std::string a = write_metrics("bad1.jsonl", step_line(1, 2.0) + "{\"step\":\n");
  try {
    read_training_curves(a);
    FAIL() << "accepted a torn line";
  } catch (const BadInput& e) {
    EXPECT_EQ(std::string(e.what()).rfind(a + ":2: not a JSON record", 0), 0u) << e.what();
  }
  const std::string b = write_metrics("bad2.jsonl", "{\"eval\":{\"step\":\"x\"}}\n");
  EXPECT_THROW(
      {
        try {
          read_training_curves(b);
        } catch (const BadInput& e) {
          EXPECT_EQ(std::string(e.what()), b + ":1: field 'eval.step' must be an integer step");
          throw;
        }
      },
      BadInput);
  EXPECT_THROW(read_training_curves(write_metrics("bad3.jsonl", "[1]\n")), BadInput);
  EXPECT_THROW(read_training_curves("/nonexistent/metrics.jsonl"), BadInput);
}

TEST(TrainingCurves, ChartGeometry) {
  // The plot area is x 72..504, y 34..210: step 0 -> x 72, step 10 -> x 504; the lowest value at
  // the bottom (y 210), the highest at the top (y 34).
  const CurvePoints points{{0, 0.0}, {10, 1.0}};
  const std::string svg = line_chart_svg("Loss", {{"train", "#2563a8", &points}});
  EXPECT_NE(svg.find("points=\"72.0,210.0 504.0,34.0\""), std::string::npos) << svg;
  // A flat curve is drawn mid-height: 0.25 in 0.2375..0.2625, 0 in -1..1.
  const CurvePoints flat{{1, 0.25}, {3, 0.25}}, zero{{1, 0.0}, {3, 0.0}};
  EXPECT_NE(line_chart_svg("lr", {{"lr", "#2563a8", &flat}}).find("points=\"72.0,122.0 504.0,122.0\""),
            std::string::npos);
  EXPECT_NE(line_chart_svg("acc", {{"acc", "#2563a8", &zero}}).find(">-1</text>"), std::string::npos);
  const CurvePoints none;
  EXPECT_NE(line_chart_svg("Loss", {{"train", "#2563a8", &none}}).find(">no data</text>"), std::string::npos);
  EXPECT_EQ(line_chart_svg("Loss", {{"train", "#2563a8", &none}}).find("<polyline"), std::string::npos);
}

TrainingRunInfo hostile_info() {
  return {{{"model", "/models/<script>alert(\"m\")</script>"},
           {"adapter", "LoRA, r 8, alpha 16"},
           {"data", "a&b.jsonl (medqa)"},
           {"steps", "30"}},
          "/runs/o'neil <b>"};
}

TEST(TrainingReport, EscapesAndIsSelfContained) {
  const std::string h =
      render_training_report(hostile_info(), read_training_curves(write_metrics("run.jsonl", synthetic_run(true))));
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<b>"), std::string::npos);
  EXPECT_NE(h.find("/models/&lt;script&gt;alert(&quot;m&quot;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(h.find("a&amp;b.jsonl (medqa)"), std::string::npos);
  EXPECT_NE(h.find("/runs/o&#39;neil &lt;b&gt;"), std::string::npos);
  for (const char* external : {"src=", "href=", "url(", "@import", "http"})
    EXPECT_EQ(h.find(external), std::string::npos) << external;
  // Loss (train and eval), accuracy, lr, gradient norm, tokens/s, memory: six charts, seven lines.
  size_t charts = 0, lines = 0;
  for (size_t at = 0; (at = h.find("<svg class=\"chart\"", at)) != std::string::npos; ++at) ++charts;
  for (size_t at = 0; (at = h.find("<polyline", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(charts, 6u);
  EXPECT_EQ(lines, 7u);
  EXPECT_NE(h.find("class=\"status finished\">finished<"), std::string::npos);
  EXPECT_NE(h.find("<td>last logged step</td><td>30</td>"), std::string::npos);
}

TEST(TrainingReport, ARunningPageReloadsItself) {
  const std::string live =
      render_training_report(hostile_info(), read_training_curves(write_metrics("live.jsonl", synthetic_run(false))));
  EXPECT_NE(live.find("<meta http-equiv=\"refresh\" content=\"30\">"), std::string::npos);
  EXPECT_NE(live.find("class=\"status running\">running<"), std::string::npos);
  // Without evaluations there is no accuracy chart: five charts.
  const std::string no_eval =
      render_training_report(hostile_info(), read_training_curves(write_metrics("noeval.jsonl", step_line(1, 2.0))));
  size_t charts = 0;
  for (size_t at = 0; (at = no_eval.find("<svg class=\"chart\"", at)) != std::string::npos; ++at) ++charts;
  EXPECT_EQ(charts, 5u);
}

// --compare's comparison.html: the training run is found through report.json's adapter (its
// metrics.jsonl one level up, as medtune train lays out output_dir/adapter); otherwise the page
// says why there are no curves.
TEST(TrainingComparison, FindsTheTrainingRunBehindEachEvalRun) {
  const fs::path root = fs::path(write_metrics("run.jsonl", synthetic_run(true))).parent_path() / "cmp";
  fs::remove_all(root);
  fs::create_directories(root / "train/adapter");
  fs::copy_file(root.parent_path() / "run.jsonl", root / "train/metrics.jsonl");
  fs::create_directories(root / "tuned");
  std::ofstream(root / "tuned/report.json") << nlohmann::json{{"provenance", {{"adapter", (root / "train/adapter").string()}}}};
  fs::create_directories(root / "base");
  std::ofstream(root / "base/report.json") << R"({"provenance": {"adapter": "none"}})";
  fs::create_directories(root / "moved");
  std::ofstream(root / "moved/report.json") << R"({"provenance": {"adapter": "/nowhere/<x>"}})";

  const TrainingRunOfEval tuned = training_run_of_eval((root / "tuned").string());
  ASSERT_TRUE(tuned.curves);
  EXPECT_EQ(tuned.metrics_path, (root / "train/metrics.jsonl").string());
  EXPECT_EQ(tuned.curves->loss.size(), 30u);
  // A predictions file names its run directory too.
  EXPECT_TRUE(training_run_of_eval((root / "tuned/predictions.jsonl").string()).curves);
  const TrainingRunOfEval base = training_run_of_eval((root / "base").string());
  EXPECT_FALSE(base.curves);
  EXPECT_EQ(base.why_none, "evaluated without an adapter (the base model): no training run");
  const TrainingRunOfEval moved = training_run_of_eval((root / "moved").string());
  EXPECT_FALSE(moved.curves);
  EXPECT_NE(moved.why_none.find("no metrics.jsonl in the adapter's directory /nowhere/<x>"), std::string::npos);
  EXPECT_NE(training_run_of_eval((root / "absent").string()).why_none.find("report.json is absent"), std::string::npos);

  const std::string page = render_training_comparison("A  base  1/4 <25%>\n", base, tuned);
  EXPECT_NE(page.find("A  base  1/4 &lt;25%&gt;"), std::string::npos);
  EXPECT_NE(page.find("no training curves: evaluated without an adapter"), std::string::npos);
  size_t charts = 0, lines = 0;
  for (size_t at = 0; (at = page.find("<svg class=\"chart\"", at)) != std::string::npos; ++at) ++charts;
  for (size_t at = 0; (at = page.find("<polyline", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(charts, 6u);
  EXPECT_EQ(lines, 6u);  // B's six curves; A has none
  const std::string neither = render_training_comparison("", base, moved);
  EXPECT_EQ(neither.find("<svg"), std::string::npos);
  EXPECT_NE(neither.find("/nowhere/&lt;x&gt;"), std::string::npos);
  EXPECT_EQ(neither.find("<x>"), std::string::npos);

  std::ofstream(root / "train/metrics.jsonl", std::ios::app) << "{torn\n";
  EXPECT_THROW(training_run_of_eval((root / "tuned").string()), BadInput);
}

// ---- the screenshot: PNG decoding just far enough to count pixels (8-bit RGB or RGBA, no
// interlace: what chromium writes) ----
uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

struct Image {
  uint32_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // rows of width * channels bytes
  const uint8_t* at(uint32_t x, uint32_t y) const { return &pixels[(size_t{y} * width + x) * channels]; }
};

Image decode_png(const std::string& png) {
  Image img;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      img.width = be32(png, at + 8);
      img.height = be32(png, at + 12);
      const int depth = static_cast<unsigned char>(png[at + 16]), color = static_cast<unsigned char>(png[at + 17]);
      if (depth != 8 || (color != 2 && color != 6) || png[at + 20] != 0)
        throw std::runtime_error("PNG: not 8-bit RGB/RGBA non-interlaced");
      img.channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  const size_t stride = size_t{img.width} * img.channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    throw std::runtime_error("PNG: bad image data");
  img.pixels.resize(stride * img.height);
  const size_t bpp = img.channels;
  for (size_t y = 0; y < img.height; ++y) {  // undo the per-row filters (PNG spec section 9)
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &img.pixels[y * stride];
    const uint8_t* up = y > 0 ? &img.pixels[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? out[i - bpp] : 0, b = up ? up[i] : 0, c = (up && i >= bpp) ? up[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
          break;
        }
        default: break;
      }
      out[i] = static_cast<uint8_t>(in[i] + pred);
    }
  }
  return img;
}

// Renders the synthetic finished run to <build>/training_report_fixture.html, screenshots it with
// headless chromium into training_report_fixture.png (where a person can look at it), and counts
// the pixels in the curves' colours: blue (#2563a8, training lines) and orange (#c2410c,
// evaluation). A page whose SVG failed to draw has none of either.
TEST(TrainingReportScreenshotSlow, ChromiumDrawsTheCurves) {
  const std::string html_path = MEDTUNE_BINARY_DIR "/training_report_fixture.html";
  const std::string png_path = MEDTUNE_BINARY_DIR "/training_report_fixture.png";
  std::ofstream(html_path) << render_training_report(
      hostile_info(), read_training_curves(write_metrics("run.jsonl", synthetic_run(true))));
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) GTEST_SKIP() << "chromium not installed";
  fs::remove(png_path);
  const fs::path profile = medtune::testing::scratch_dir("training_report_chromium");
  // A private profile directory: chromium refuses to share one between concurrent runs.
  const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                          profile.string() + " --screenshot=" + png_path + " --window-size=1200,1400 file://" +
                          html_path + " >" + profile.string() + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (log: " << profile.string() << ".log)";
  std::ifstream in(png_path, std::ios::binary);
  ASSERT_TRUE(in) << "no screenshot at " << png_path;
  std::string png(fs::file_size(png_path), '\0');
  in.read(png.data(), static_cast<std::streamsize>(png.size()));
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const Image img = decode_png(png);
  ASSERT_EQ(img.width, 1200u);
  ASSERT_EQ(img.height, 1400u);
  size_t blue = 0, orange = 0, non_white = 0;
  for (uint32_t y = 0; y < img.height; ++y)
    for (uint32_t x = 0; x < img.width; ++x) {
      const uint8_t* p = img.at(x, y);
      const int r = p[0], g = p[1], b = p[2];
      if (r < 240 || g < 240 || b < 240) ++non_white;
      if (b > r + 80 && b > g + 30) ++blue;      // #2563a8 and its anti-aliased edges
      if (r > b + 100 && r > g + 60) ++orange;   // #c2410c
    }
  // Five blue polylines ~410 px long, 2 px wide plus anti-aliasing: 4120 pixels when this test was
  // written (chromium 1200x1400); two orange lines with their markers: 1381. Asking for about
  // half leaves room for font and anti-aliasing differences between chromium versions.
  EXPECT_GT(blue, 2000u);
  EXPECT_GT(orange, 500u);
  EXPECT_LT(non_white, size_t{img.width} * img.height * 9 / 10);  // not a page of one colour
}

}  // namespace
}  // namespace medtune::eval
