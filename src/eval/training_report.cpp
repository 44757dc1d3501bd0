#include "eval/training_report.h"

#include "eval/report_html.h"

namespace medtune::eval {

namespace {


constexpr const char* kCss = R"~(
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:#1f2933;font:15px/1.5 "DejaVu Sans","Segoe UI",Helvetica,Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 32px 40px}
h1{font-size:26px;margin:0 0 2px;font-weight:600}
.sub{color:#52606d;margin:0 0 20px;font-size:14px;word-break:break-all}
.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:16px 18px;margin-bottom:18px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px}
.grid .card{margin-bottom:0}
table{border-collapse:collapse;width:100%;font-size:14px}
td{text-align:left;padding:5px 8px;border-bottom:1px solid #e5e9ef}
td:first-child{color:#52606d;white-space:nowrap;width:20%}
td{word-break:break-all}
.status{display:inline-block;border-radius:12px;padding:1px 12px;font-weight:600;font-size:14px}
.status.running{background:#e0ecf9;color:#1e4e8c}
.status.finished{background:#e3f4e8;color:#166534}
.status.stopped{background:#fdecec;color:#7f1d1d}
svg{max-width:100%;height:auto}
svg text{font-family:inherit}
)~";

}  // namespace

std::string render_training_report(const TrainingRunInfo& info, const TrainingCurves& c) {
  const std::string status = run_status(c);
  const std::string status_class = status == "running" ? "running" : status == "finished" ? "finished" : "stopped";
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // While the run goes, an open page reloads itself to follow it; a finished page stays still.
  if (status == "running") h += "<meta http-equiv=\"refresh\" content=\"30\">\n";
  h += "<title>Training run report</title>\n<style>" + std::string(kCss) +
       "</style></head><body><main>\n<h1>Training run <span class=\"status " + status_class + "\">" +
       html_escape(status) + "</span></h1>\n<p class=\"sub\">" + html_escape(info.output_dir) + "</p>\n";
  h += "<div class=\"card\"><table>\n";
  for (const auto& [label, value] : info.identity)
    h += "<tr><td>" + html_escape(label) + "</td><td>" + html_escape(value) + "</td></tr>\n";
  if (!c.loss.empty())
    h += "<tr><td>last logged step</td><td>" + std::to_string(c.loss.back().first) + "</td></tr>\n";
  h += "</table></div>\n<div class=\"grid\">\n";
  std::vector<std::pair<std::string, std::vector<ChartLine>>> charts = {
      {"Loss", {{"train", kCurveBlue, &c.loss}, {"eval", kCurveOrange, &c.eval_loss, true}}},
      {"Learning rate", {{"lr", kCurveBlue, &c.learning_rate}}},
      {"Gradient norm (before clipping)", {{"grad norm", kCurveBlue, &c.grad_norm}}},
      {"Tokens per second", {{"tokens/s", kCurveBlue, &c.tokens_per_s}}},
      {"Resident memory (MiB)", {{"RSS", kCurveBlue, &c.rss_mib}}},
  };
  if (!c.eval_accuracy.empty())  // runs that score validation questions
    charts.insert(charts.begin() + 1, {"Evaluation accuracy", {{"eval", kCurveOrange, &c.eval_accuracy}}});
  for (const auto& [title, lines] : charts) h += "<div class=\"card\">" + line_chart_svg(title, lines) + "</div>\n";
  return h + "</div>\n</main></body></html>\n";
}

}  // namespace medtune::eval
