#include "eval/training_curves.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "eval/report_html.h"

namespace medtune::eval {

namespace {

using nlohmann::json;

// Appends (step, json[key]) when the key holds a number; a later step at or before the curve's
// last one (a resumed log) first drops the points it replaces.
void add_point(CurvePoints& curve, int64_t step, const json& j, const char* key, double scale = 1.0) {
  while (!curve.empty() && curve.back().first >= step) curve.pop_back();
  const auto it = j.find(key);
  if (it != j.end() && it->is_number()) curve.emplace_back(step, it->get<double>() * scale);
}

int64_t step_of(const json& j, const std::string& where, const char* field) {
  const auto it = j.find("step");
  if (it == j.end() || !it->is_number_integer())
    throw BadInput(where + ": field '" + field + "' must be an integer step");
  return it->get<int64_t>();
}

std::string fmt_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);  // "2.57e+04", "0.000153": fits the left margin
  return buf;
}

}  // namespace

TrainingCurves read_training_curves(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BadInput(path + ": cannot open the training metrics");
  TrainingCurves c;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw BadInput(where + ": not a JSON record: " + e.what());
    }
    if (!j.is_object()) throw BadInput(where + ": a metrics record must be a JSON object");
    if (j.contains("eval")) {
      const json& e = j["eval"];
      if (!e.is_object()) throw BadInput(where + ": field 'eval' must be an object");
      const int64_t step = step_of(e, where, "eval.step");
      // An accuracy-only evaluation logs loss 0 over 0 tokens: that is no loss.
      if (e.value("tokens", int64_t{0}) > 0) add_point(c.eval_loss, step, e, "loss");
      add_point(c.eval_accuracy, step, e, "accuracy");
    } else if (j.contains("summary")) {
      c.summary = j["summary"];
    } else {
      const int64_t step = step_of(j, where, "step");
      add_point(c.loss, step, j, "loss");
      add_point(c.learning_rate, step, j, "lr");
      add_point(c.grad_norm, step, j, "grad_norm");
      add_point(c.tokens_per_s, step, j, "tokens_per_s");
      add_point(c.rss_mib, step, j, "rss_bytes", 1.0 / (1024.0 * 1024.0));
      c.summary.reset();  // steps after a summary: a later invocation is running
    }
  }
  return c;
}

std::string run_status(const TrainingCurves& c) {
  if (!c.summary) return "running";
  const std::string reason = c.summary->value("stop_reason", std::string("?"));
  return reason == "completed" ? "finished" : "stopped (" + reason + ")";
}

std::string line_chart_svg(const std::string& title, const std::vector<ChartLine>& lines) {
  constexpr double kW = 520, kH = 250, kLeft = 72, kRight = 16, kTop = 34, kBottom = 40;
  constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const ChartLine& l : lines)
    for (const auto& [s, v] : *l.points) {
      x0 = std::min(x0, static_cast<double>(s));
      x1 = std::max(x1, static_cast<double>(s));
      y0 = std::min(y0, v);
      y1 = std::max(y1, v);
    }
  char buf[256];
  std::string svg = "<svg class=\"chart\" width=\"520\" height=\"250\" viewBox=\"0 0 520 250\" role=\"img\" aria-label=\"" +
                    html_escape(title) + "\">";
  svg += "<text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"600\" fill=\"#1f2933\">" + html_escape(title) + "</text>";
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"#fbfcfd\" stroke=\"#c5ced8\"/>", kLeft, kTop,
                kPlotW, kPlotH);
  svg += buf;
  if (!(x0 <= x1)) {
    std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\" font-size=\"13\" fill=\"#6b7280\" text-anchor=\"middle\">no data</text>",
                  kLeft + kPlotW / 2, kTop + kPlotH / 2);
    return svg + buf + "</svg>";
  }
  // A flat curve or a single step still gets a range to draw in.
  if (y1 - y0 < 1e-12 * std::max(1.0, std::fabs(y1))) {
    const double pad = y1 != 0 ? std::fabs(y1) * 0.05 : 1.0;  // an accuracy of 0 throughout: -1..1
    y0 -= pad;
    y1 += pad;
  }
  if (x1 == x0) x1 = x0 + 1;
  const auto px = [&](double s) { return kLeft + (s - x0) / (x1 - x0) * kPlotW; };
  const auto py = [&](double v) { return kTop + (1.0 - (v - y0) / (y1 - y0)) * kPlotH; };
  for (int i = 0; i <= 4; ++i) {  // five value ticks, three step ticks
    const double v = y0 + (y1 - y0) * i / 4.0;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e9ef\"/>"
                  "<text x=\"%g\" y=\"%.1f\" font-size=\"11\" fill=\"#52606d\" text-anchor=\"end\">%s</text>",
                  kLeft, kLeft + kPlotW, py(v), py(v), kLeft - 6, py(v) + 4, fmt_number(v).c_str());
    svg += buf;
  }
  for (int i = 0; i <= 2; ++i) {
    const double s = x0 + (x1 - x0) * i / 2.0;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%g\" font-size=\"11\" fill=\"#52606d\" text-anchor=\"middle\">%s</text>",
                  px(s), kTop + kPlotH + 16, fmt_number(std::round(s)).c_str());
    svg += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%g\" y=\"%g\" font-size=\"11\" fill=\"#52606d\" text-anchor=\"middle\">step</text>",
                kLeft + kPlotW / 2, kH - 6);
  svg += buf;
  double legend_x = kW - kRight;
  for (auto l = lines.rbegin(); l != lines.rend(); ++l) {  // right-aligned legend, last line rightmost
    const double width = 28 + 7.0 * static_cast<double>(l->label.size());
    legend_x -= width;
    std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"16\" y2=\"16\" stroke=\"%s\" stroke-width=\"2.5\"%s/>",
                  legend_x, legend_x + 18, l->color.c_str(), l->dashed ? " stroke-dasharray=\"5 3\"" : "");
    svg += buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"20\" font-size=\"12\" fill=\"#3e4c59\">", legend_x + 22);
    svg += buf + html_escape(l->label) + "</text>";
  }
  for (const ChartLine& l : lines) {
    if (l.points->empty()) continue;
    std::string pts;
    for (const auto& [s, v] : *l.points) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(static_cast<double>(s)), py(v));
      pts += buf;
    }
    pts.pop_back();
    svg += "<polyline fill=\"none\" stroke=\"" + l.color + "\" stroke-width=\"2\" stroke-linejoin=\"round\"" +
           (l.dashed ? " stroke-dasharray=\"5 3\"" : "") + " points=\"" + pts + "\"/>";
    if (l.points->size() <= 20)  // few points (evaluations): marked, so a single one shows
      for (const auto& [s, v] : *l.points) {
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", px(static_cast<double>(s)),
                      py(v), l.color.c_str());
        svg += buf;
      }
  }
  return svg + "</svg>";
}

}  // namespace medtune::eval
