#include "eval/training_comparison.h"

#include <filesystem>

#include "core/error.h"
#include "eval/report_html.h"
#include "io/whole_file.h"

namespace medtune::eval {

namespace fs = std::filesystem;

namespace {


constexpr const char* kCss = R"~(
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:#1f2933;font:15px/1.5 "DejaVu Sans","Segoe UI",Helvetica,Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 32px 40px}
h1{font-size:26px;margin:0 0 12px;font-weight:600}
.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:16px 18px;margin-bottom:18px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px}
.grid .card{margin-bottom:0}
pre{margin:0;font:13px/1.5 "DejaVu Sans Mono",Consolas,monospace;white-space:pre-wrap;word-break:break-all}
.note{color:#7c2d12;margin:4px 0}
svg{max-width:100%;height:auto}
svg text{font-family:inherit}
)~";

}  // namespace

TrainingRunOfEval training_run_of_eval(const std::string& eval_run) {
  TrainingRunOfEval r;
  r.eval_run = eval_run;
  const fs::path dir = fs::is_directory(eval_run) ? fs::path(eval_run) : fs::path(eval_run).parent_path();
  const fs::path report = dir / "report.json";
  if (!fs::exists(report)) {
    r.why_none = report.string() + " is absent: the adapter this run scored is not recorded";
    return r;
  }
  // Not const: with a const json, GCC 12 reports a null dereference in the operator[] below
  // (-Wnull-dereference, a false positive).
  nlohmann::json j = io::read_json_file(report.string());
  const auto prov = j.find("provenance");
  if (prov == j.end() || !prov->is_object() || !prov->contains("adapter") || !(*prov)["adapter"].is_string()) {
    r.why_none = report.string() + " records no adapter (field 'provenance.adapter')";
    return r;
  }
  const std::string adapter = (*prov)["adapter"].get<std::string>();
  if (adapter == "none") {
    r.why_none = "evaluated without an adapter (the base model): no training run";
    return r;
  }
  for (const fs::path& candidate : {fs::path(adapter) / "metrics.jsonl", fs::path(adapter).parent_path() / "metrics.jsonl"})
    if (fs::is_regular_file(candidate)) {
      r.metrics_path = candidate.string();
      r.curves = read_training_curves(r.metrics_path);
      return r;
    }
  r.why_none = "no metrics.jsonl in the adapter's directory " + adapter + " or the one above it (not written by medtune train, or moved)";
  return r;
}

std::string render_training_comparison(const std::string& comparison_text, const TrainingRunOfEval& a,
                                       const TrainingRunOfEval& b) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>Evaluation comparison</title>\n<style>" +
      std::string(kCss) + "</style></head><body><main>\n<h1>Evaluation comparison</h1>\n<div class=\"card\"><pre>" +
      html_escape(comparison_text) + "</pre></div>\n<div class=\"card\"><b>Training runs</b>\n";
  for (const auto& [name, run] : {std::pair{"A", &a}, std::pair{"B", &b}}) {
    h += "<p>" + std::string(name) + " (" + html_escape(run->eval_run) + "): ";
    h += run->curves ? html_escape(run->metrics_path)
                     : "<span class=\"note\">no training curves: " + html_escape(run->why_none) + "</span>";
    h += "</p>\n";
  }
  h += "</div>\n";
  if (!a.curves && !b.curves) return h + "</main></body></html>\n";
  static const TrainingCurves kNone;
  const TrainingCurves& ca = a.curves ? *a.curves : kNone;
  const TrainingCurves& cb = b.curves ? *b.curves : kNone;
  using Member = CurvePoints TrainingCurves::*;
  const std::vector<std::pair<std::string, Member>> charts = {
      {"Training loss", &TrainingCurves::loss},
      {"Evaluation loss", &TrainingCurves::eval_loss},
      {"Learning rate", &TrainingCurves::learning_rate},
      {"Gradient norm (before clipping)", &TrainingCurves::grad_norm},
      {"Tokens per second", &TrainingCurves::tokens_per_s},
      {"Resident memory (MiB)", &TrainingCurves::rss_mib},
  };
  h += "<div class=\"grid\">\n";
  for (const auto& [title, member] : charts)
    h += "<div class=\"card\">" + line_chart_svg(title, {{"A", kCurveBlue, &(ca.*member)}, {"B", kCurveOrange, &(cb.*member)}}) +
         "</div>\n";
  return h + "</div>\n</main></body></html>\n";
}

}  // namespace medtune::eval
