#include "eval/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/error.h"

namespace medtune::eval {

using nlohmann::json;

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

namespace {

__attribute__((format(printf, 1, 2))) std::string fmt(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// "32.4%" / "29.9–35.0%": one decimal is all a 1272-question set supports (1 question = 0.08%).
std::string pct(double x) {
  return fmt("%.1f%%", 100.0 * x);
}
std::string pct_range(double lo, double hi) {
  return fmt("%.1f\u2013%.1f%%", 100.0 * lo, 100.0 * hi);
}

// Field access that names the missing or mistyped field, since report.json may come from disk.
const json& field(const json& j, const std::string& path, const char* key) {
  if (!j.is_object() || !j.contains(key))
    throw BadInput("report: missing field '" + path + (path.empty() ? "" : ".") + key + "'");
  return j.at(key);
}
double number(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_number()) throw BadInput("report: field '" + path + "." + key + "' must be a number");
  return v.get<double>();
}
int64_t integer(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_number_integer())
    throw BadInput("report: field '" + path + "." + key + "' must be an integer");
  return v.get<int64_t>();
}
std::string text(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_string()) throw BadInput("report: field '" + path + "." + key + "' must be a string");
  return v.get<std::string>();
}

struct Acc {
  int64_t correct, n;
  double value, lo, hi;
};
Acc read_acc(const json& j, const std::string& path) {
  const json& ci = field(j, path, "ci95");
  return {integer(j, path, "correct"), integer(j, path, "n"), number(j, path, "value"),
          number(ci, path + ".ci95", "lo"), number(ci, path + ".ci95", "hi")};
}

// Palette: one blue for the model, grey for the reference (gold), amber/red for warnings.
constexpr const char* kModel = "#2563a8";
constexpr const char* kGold = "#a3acb9";
constexpr const char* kPrior = "#c2410c";
constexpr const char* kMuted = "#6b7280";

constexpr const char* kCss = R"~(
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:#1f2933;font:15px/1.5 "DejaVu Sans","Segoe UI",Helvetica,Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:28px 32px 40px}
h1{font-size:26px;margin:0 0 2px;font-weight:600}
h2{font-size:17px;margin:0 0 12px;font-weight:600}
.sub{color:#52606d;margin:0 0 20px;font-size:14px;word-break:break-all}
.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:20px 24px;margin-bottom:18px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px;margin-bottom:18px}
.grid .card{margin-bottom:0}
.head{display:flex;gap:32px;align-items:center}
.big{font-size:52px;font-weight:700;color:#2563a8;line-height:1}
.ci{color:#52606d;font-size:15px;margin-top:6px}
.sentence{font-size:17px;margin:14px 0 0}
.banner{display:flex;gap:14px;align-items:flex-start;border-radius:8px;padding:14px 20px;margin-bottom:18px;border:1px solid #f0b37e;background:#fff4e8;color:#7c2d12}
.banner.bad{border-color:#f5a3a3;background:#fdecec;color:#7f1d1d}
.banner b{display:block;font-size:16px}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e5e9ef;vertical-align:middle}
th{color:#52606d;font-weight:600;font-size:13px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
svg{max-width:100%;height:auto;flex:none}
.cal{display:grid;grid-template-columns:420px 1fr;gap:32px;align-items:center}
.legend{display:flex;gap:18px;flex-wrap:wrap;font-size:12px;color:#3e4c59;margin-top:6px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}
.legend i.dash{width:18px;height:0;border-top:2px dashed #3e4c59;vertical-align:middle}
td svg{max-width:none}
.baselines{margin-top:18px}
.prov td:first-child{color:#52606d;white-space:nowrap;width:28%}
.prov td{font-family:"DejaVu Sans Mono",Consolas,monospace;font-size:13px;word-break:break-all}
.note{color:#52606d;font-size:13px;margin:8px 0 0}
.methods{font-size:13px;color:#3e4c59}
.methods li{margin-bottom:4px}
svg text{font-family:inherit}
)~";

// A 0-100% axis with the model's interval, the letter prior and chance: the headline at a glance.
std::string strip_svg(const Acc& acc, double prior, char prior_letter, double chance) {
  const double x0 = 24, w = 600, axis = 58;
  auto X = [&](double v) { return x0 + w * v; };
  // Labels near either end are anchored inwards so they stay inside the picture.
  auto anchor = [&](double v) { return v < 0.08 ? "start" : v > 0.92 ? "end" : "middle"; };
  std::string s =
      R"~(<svg width="648" height="104" viewBox="0 0 648 104" role="img" aria-label="accuracy compared with baselines">)~";
  s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#cbd2d9" stroke-width="2"/>)~",
           X(0), axis, X(1), axis);
  for (int t = 0; t <= 10; ++t) {
    const double v = t / 10.0;
    s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#cbd2d9"/>)~", X(v),
             axis - 4, X(v), axis + 4);
    if (t % 2 == 0)
      s += fmt(
          R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="middle">%d%%</text>)~",
          X(v), axis + 20, kMuted, t * 10);
  }
  // Three label rows (prior on top, model in the middle, chance below the axis) never collide.
  s += fmt(
      R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="3 3"/>)~",
      X(chance), axis - 12, X(chance), axis + 30, kMuted);
  s += fmt(
      R"~(<text x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="%s">random choice %s</text>)~",
      X(chance), axis + 42, kMuted, anchor(chance), pct(chance).c_str());
  s += fmt(R"~(<line x1="%.1f" y1="18" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/>)~",
           X(prior), X(prior), axis + 10, kPrior);
  s += fmt(
      R"~(<text x="%.1f" y="13" font-size="12" fill="%s" text-anchor="%s">always %c: %s</text>)~",
      X(prior), kPrior, anchor(prior), prior_letter, pct(prior).c_str());
  s += fmt(
      R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="14" rx="3" fill="%s" fill-opacity="0.28"/>)~",
      X(acc.lo), axis - 7, std::max(2.0, X(acc.hi) - X(acc.lo)), kModel);
  s += fmt(R"~(<circle cx="%.1f" cy="%.1f" r="6" fill="%s"/>)~", X(acc.value), axis, kModel);
  s += fmt(
      R"~(<text x="%.1f" y="%.1f" font-size="13" font-weight="600" fill="%s" text-anchor="%s">model %s</text>)~",
      X(acc.value), axis - 16, kModel, anchor(acc.value), pct(acc.value).c_str());
  return s + "</svg>";
}

// Small interval bar for a table row: 0-100%, interval, point, and the letter prior as a tick.
std::string mini_ci_svg(const Acc& acc, double prior) {
  const double w = 120;
  std::string s = R"~(<svg width="130" height="16" viewBox="0 0 130 16">)~";
  s += fmt(R"~(<line x1="5" y1="8" x2="%.1f" y2="8" stroke="#e1e6ec" stroke-width="2"/>)~", 5 + w);
  s +=
      fmt(R"~(<rect x="%.1f" y="4" width="%.1f" height="8" rx="2" fill="%s" fill-opacity="0.3"/>)~",
          5 + w * acc.lo, std::max(1.5, w * (acc.hi - acc.lo)), kModel);
  s += fmt(R"~(<circle cx="%.1f" cy="8" r="3.5" fill="%s"/>)~", 5 + w * acc.value, kModel);
  s += fmt(R"~(<line x1="%.1f" y1="1" x2="%.1f" y2="15" stroke="%s" stroke-width="1.5"/>)~",
           5 + w * prior, 5 + w * prior, kPrior);
  return s + "</svg>";
}

// Grouped bars: for each letter, how often it is the gold answer and how often the model picks it.
std::string letters_svg(const json& dist) {
  const json& letters = field(dist, "metrics.letter_distribution", "letters");
  const json& gold = field(dist, "metrics.letter_distribution", "gold");
  const json& pred = field(dist, "metrics.letter_distribution", "predicted");
  const int64_t unanswered = integer(dist, "metrics.letter_distribution", "unanswered");
  if (!letters.is_array() || !gold.is_array() || !pred.is_array() ||
      gold.size() != letters.size() || pred.size() != letters.size())
    throw BadInput("report: 'metrics.letter_distribution' lists must have one entry per letter");
  const size_t groups = letters.size() + (unanswered > 0 ? 1 : 0);
  int64_t top = 1;
  for (size_t i = 0; i < letters.size(); ++i)
    top = std::max({top, gold[i].get<int64_t>(), pred[i].get<int64_t>()});
  top = std::max(top, unanswered);
  // A round axis maximum: 1, 2 or 5 times a power of ten, with 4-5 gridlines.
  double step = std::pow(10.0, std::floor(std::log10(static_cast<double>(top) / 4.0)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (static_cast<double>(top) / (step * m) <= 5.0) {
      step *= m;
      break;
    }
  const double ymax = step * std::ceil(static_cast<double>(top) / step);
  const double left = 48, right = 500, top_y = 30, bottom = 220, h = bottom - top_y;
  const double gw = (right - left) / static_cast<double>(groups);
  std::string s =
      R"~(<svg width="510" height="262" viewBox="0 0 510 262" role="img" aria-label="predicted and gold letter distribution">)~";
  for (double v = 0; v <= ymax + 1e-9; v += step) {
    const double y = bottom - h * v / ymax;
    s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e9ef"/>)~", left, y,
             right, y);
    s += fmt(R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="end">%.0f</text>)~",
             left - 6, y + 4, kMuted, v);
  }
  auto bar = [&](double x, double bw, int64_t count, const char* colour) {
    const double bh = h * static_cast<double>(count) / ymax;
    s += fmt(R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s"/>)~", x,
             bottom - bh, bw, bh, colour);
    s += fmt(
        R"~(<text x="%.1f" y="%.1f" font-size="11" fill="#3e4c59" text-anchor="middle">%lld</text>)~",
        x + bw / 2, bottom - bh - 4, static_cast<long long>(count));
  };
  const double bw = std::min(40.0, gw * 0.36);
  for (size_t i = 0; i < groups; ++i) {
    const double cx = left + gw * (static_cast<double>(i) + 0.5);
    const bool none = i == letters.size();
    if (!none) bar(cx - bw - 2, bw, gold[i].get<int64_t>(), kGold);
    bar(none ? cx - bw / 2 : cx + 2, bw, none ? unanswered : pred[i].get<int64_t>(), kModel);
    const std::string label = none ? "no answer" : html_escape(letters[i].get<std::string>());
    s += fmt(
        R"~(<text x="%.1f" y="%.1f" font-size="13" font-weight="600" text-anchor="middle">%s</text>)~",
        cx, bottom + 18, label.c_str());
  }
  s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#9aa5b1"/>)~", left, bottom,
           right, bottom);
  s += fmt(
      R"~(<rect x="%.1f" y="246" width="12" height="12" fill="%s"/><text x="%.1f" y="256" font-size="12">gold answer</text>)~",
      left + 120, kGold, left + 138);
  s += fmt(
      R"~(<rect x="%.1f" y="246" width="12" height="12" fill="%s"/><text x="%.1f" y="256" font-size="12">model&#39;s choice</text>)~",
      left + 240, kModel, left + 258);
  s += fmt(R"~(<text x="%.1f" y="16" font-size="11" fill="%s">questions</text>)~", left - 40,
           kMuted);
  return s + "</svg>";
}

// Reliability diagram (accuracy per confidence bin against the diagonal) over a histogram of how
// many questions fall in each bin: the two panels of Guo et al.'s figure 1.
std::string reliability_svg(const json& cal) {
  const json& bins = field(cal, "metrics.calibration", "bins");
  if (!bins.is_array() || bins.empty())
    throw BadInput("report: 'metrics.calibration.bins' must be a non-empty list");
  const double L = 56, T = 14, W = 340, H = 300, HT = T + H + 40, HH = 70;
  auto X = [&](double v) { return L + W * v; };
  auto Y = [&](double v) { return T + H * (1 - v); };
  std::string s =
      R"~(<svg width="420" height="470" viewBox="0 0 420 470" role="img" aria-label="reliability diagram">)~";
  s += fmt(
      R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fafbfc" stroke="#cbd2d9"/>)~",
      L, T, W, H);
  for (int t = 0; t <= 5; ++t) {
    const double v = t / 5.0;
    s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eef1f4"/>)~", L, Y(v),
             L + W, Y(v));
    s += fmt(R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="end">%d%%</text>)~",
             L - 6, Y(v) + 4, kMuted, t * 20);
    s += fmt(
        R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="middle">%d%%</text>)~",
        X(v), HT + HH + 16, kMuted, t * 20);
  }
  int64_t most = 1;
  for (const auto& b : bins)
    most = std::max(most, integer(b, "metrics.calibration.bins[]", "count"));
  for (const auto& b : bins) {
    const std::string p = "metrics.calibration.bins[]";
    const double lo = number(b, p, "lo"), hi = number(b, p, "hi");
    const int64_t count = integer(b, p, "count");
    const double bh = HH * static_cast<double>(count) / static_cast<double>(most);
    s += fmt(R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>)~", X(lo) + 1,
             HT + HH - bh, X(hi) - X(lo) - 2, bh, kGold);
    if (count == 0) continue;
    const double acc = number(b, p, "accuracy"), conf = number(b, p, "mean_confidence");
    s += fmt(
        R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.85"/>)~",
        X(lo) + 1, Y(acc), X(hi) - X(lo) - 2, Y(0) - Y(acc), kModel);
    // The gap between accuracy and confidence, which ECE averages.
    s += fmt(
        R"~(<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25" stroke="%s" stroke-opacity="0.6"/>)~",
        X(lo) + 1, Y(std::max(acc, conf)), X(hi) - X(lo) - 2, std::abs(Y(acc) - Y(conf)), kPrior,
        kPrior);
    s += fmt(
        R"~(<text x="%.1f" y="%.1f" font-size="10" fill="#3e4c59" text-anchor="middle">%lld</text>)~",
        (X(lo) + X(hi)) / 2, HT + HH - bh - 3, static_cast<long long>(count));
  }
  s += fmt(
      R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#3e4c59" stroke-dasharray="5 4"/>)~",
      X(0), Y(0), X(1), Y(1));
  s += fmt(R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#9aa5b1"/>)~", L, HT + HH,
           L + W, HT + HH);
  s += fmt(
      R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">accuracy in bin</text>)~",
      16.0, T + H / 2, kMuted, 16.0, T + H / 2);
  s += fmt(
      R"~(<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">questions</text>)~",
      16.0, HT + HH / 2, kMuted, 16.0, HT + HH / 2);
  s += fmt(
      R"~(<text x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="middle">model&#39;s confidence in its answer (max option probability)</text>)~",
      L + W / 2, HT + HH + 34, kMuted);
  return s + "</svg>";
}

// A list of file digests ({"path", "bytes", "sha256"}, eval/run_provenance.h) reads best as one
// line per file, digest first, as sha256sum prints it.
bool is_digest_list(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& d : v)
    if (!d.is_object() || !d.contains("path") || !d.contains("sha256") || !d["path"].is_string() ||
        !d["sha256"].is_string())
      return false;
  return true;
}

std::string provenance_value(const json& value) {
  if (value.is_string()) return html_escape(value.get<std::string>());
  if (!is_digest_list(value)) return html_escape(value.dump());
  std::string out;
  for (const auto& d : value) {
    out += (out.empty() ? "" : "<br>") + html_escape(d["sha256"].get<std::string>()) + "&nbsp; " +
           html_escape(d["path"].get<std::string>());
    if (d.contains("bytes") && d["bytes"].is_number_integer())
      out += " (" + std::to_string(d["bytes"].get<int64_t>()) + " bytes)";
  }
  return out;
}

std::string provenance_rows(const json& provenance) {
  std::string rows;
  for (const auto& [key, value] : provenance.items())
    rows += "<tr><td>" + html_escape(key) + "</td><td>" + provenance_value(value) + "</td></tr>\n";
  return rows.empty() ? "<tr><td colspan=\"2\">(none given)</td></tr>\n" : rows;
}

}  // namespace

std::string render_html_report(const json& report) {
  const json& m = field(report, "", "metrics");
  const json& provenance = report.contains("provenance") ? report.at("provenance") : json::object();
  if (!provenance.is_object()) throw BadInput("report: field 'provenance' must be an object");
  const Acc acc = read_acc(field(m, "metrics", "accuracy"), "metrics.accuracy");
  const int64_t num_options = integer(m, "metrics", "num_options");
  if (num_options < 2) throw BadInput("report: 'metrics.num_options' must be >= 2");
  const json& prior_j = field(m, "metrics", "letter_prior");
  const double prior = number(prior_j, "metrics.letter_prior", "accuracy");
  const std::string prior_letter = text(prior_j, "metrics.letter_prior", "letter");
  const char letter = prior_letter.size() == 1 ? prior_letter[0] : '?';
  const double chance = 1.0 / static_cast<double>(num_options);

  std::string subtitle;
  for (const char* key : {"model", "adapter", "data", "finished_at"})
    if (provenance.contains(key) && provenance[key].is_string() &&
        !provenance[key].get<std::string>().empty())
      subtitle +=
          (subtitle.empty() ? "" : " &middot; ") + html_escape(provenance[key].get<std::string>());

  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>MedQA evaluation report</title>\n<style>" +
      std::string(kCss) +
      "</style></head><body><main>\n<h1>Multiple-choice evaluation report</h1>\n<p class=\"sub\">" +
      (subtitle.empty() ? "model not recorded" : subtitle) + "</p>\n";

  // The warning comes before the number so that nobody quotes the number without it.
  if (acc.lo <= prior) {
    const bool worse = acc.hi < prior;
    h += std::string("<div class=\"banner") + (worse ? " bad" : "") +
         "\"><svg width=\"28\" height=\"26\" viewBox=\"0 0 28 26\">"
         "<path d=\"M14 2 L26 24 H2 Z\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"2.2\" "
         "stroke-linejoin=\"round\"/>"
         "<rect x=\"12.9\" y=\"9\" width=\"2.2\" height=\"8\" fill=\"currentColor\"/><circle "
         "cx=\"14\" cy=\"20.3\" r=\"1.3\" fill=\"currentColor\"/></svg><div>";
    if (worse)
      h += "<b>Worse than guessing.</b>The whole 95% confidence interval (" +
           pct_range(acc.lo, acc.hi) + ") lies below the " + pct(prior) +
           " scored by always answering " + std::string(1, letter) + ".";
    else
      h += "<b>Not distinguishable from guessing.</b>The 95% confidence interval (" +
           pct_range(acc.lo, acc.hi) + ") reaches the " + pct(prior) +
           " scored by always answering " + std::string(1, letter) +
           ". This run does not show that the model knows more than the answer-key distribution.";
    h += "</div></div>\n";
  }

  h += "<section class=\"card\"><div class=\"head\"><div><div class=\"big\">" + pct(acc.value) +
       "</div><div class=\"ci\">95% CI " + pct_range(acc.lo, acc.hi) + "<br>" +
       std::to_string(acc.correct) + " of " + std::to_string(acc.n) + " correct</div></div>" +
       strip_svg(acc, prior, letter, chance) + "</div>\n";
  h += "<p class=\"sentence\">The model chose the right answer in " + std::to_string(acc.correct) +
       " of " + std::to_string(acc.n) + " questions (" + pct(acc.value) + ", 95% CI " +
       pct_range(acc.lo, acc.hi) + "). Always answering the most common letter (" +
       std::string(1, letter) + ") would score " + pct(prior) + "; picking at random, " +
       pct(chance) + ".</p>\n";
  if (m.contains("acc_norm") && !m["acc_norm"].is_null()) {
    const Acc norm = read_acc(m["acc_norm"], "metrics.acc_norm");
    h += "<p class=\"note\">Length-normalised scoring (acc_norm): " + pct(norm.value) +
         ", 95% CI " + pct_range(norm.lo, norm.hi) + " (" + std::to_string(norm.correct) + " of " +
         std::to_string(norm.n) + ").</p>\n";
  }
  h += "</section>\n<div class=\"grid\">\n<section class=\"card\"><h2>Accuracy by question "
       "group</h2><table>\n"
       "<tr><th>group</th><th class=\"num\">correct</th><th class=\"num\">accuracy</th>"
       "<th class=\"num\">95% CI</th><th>0&ndash;100%</th></tr>\n";
  const json& groups = field(m, "metrics", "by_meta_info");
  if (!groups.is_array()) throw BadInput("report: field 'metrics.by_meta_info' must be a list");
  for (const auto& g : groups) {
    const Acc ga = read_acc(g, "metrics.by_meta_info[]");
    h += "<tr><td>" + html_escape(text(g, "metrics.by_meta_info[]", "name")) +
         "</td><td class=\"num\">" + std::to_string(ga.correct) + " of " + std::to_string(ga.n) +
         "</td><td class=\"num\">" + pct(ga.value) + "</td><td class=\"num\">" +
         pct_range(ga.lo, ga.hi) + "</td><td>" + mini_ci_svg(ga, prior) + "</td></tr>\n";
  }
  h += "</table><p class=\"note\">Bars: 95% interval and estimate; orange tick: the letter-prior "
       "baseline (" +
       pct(prior) + "). Groups come from the questions&#39; meta_info field.</p>\n";
  // The baselines in numbers, for whoever wants to recompute the warning.
  h += "<h2 class=\"baselines\">Baselines</h2><table><tr><th>strategy</th><th "
       "class=\"num\">correct</th>"
       "<th class=\"num\">accuracy</th></tr>\n<tr><td>always answer " +
       std::string(1, letter) + " (most common gold letter)</td><td class=\"num\">" +
       std::to_string(integer(prior_j, "metrics.letter_prior", "correct")) + " of " +
       std::to_string(acc.n) + "</td><td class=\"num\">" + pct(prior) +
       "</td></tr>\n<tr><td>pick a letter at random</td><td class=\"num\">"
       "expected " +
       fmt("%.1f", chance * static_cast<double>(acc.n)) + "</td><td class=\"num\">" + pct(chance) +
       "</td></tr>\n<tr><td><b>this model</b></td><td class=\"num\">" +
       std::to_string(acc.correct) + " of " + std::to_string(acc.n) + "</td><td class=\"num\"><b>" +
       pct(acc.value) + "</b></td></tr></table></section>\n";
  h += "<section class=\"card\"><h2>Which letter the model picks</h2>" +
       letters_svg(field(m, "metrics", "letter_distribution")) +
       "<p class=\"note\">A model that favours one letter far beyond its share of gold answers is "
       "following position, "
       "not content.</p></section>\n</div>\n";

  const json& cal = m.contains("calibration") ? m["calibration"] : json(nullptr);
  if (!cal.is_null()) {
    const double ece = number(cal, "metrics.calibration", "ece");
    double conf_sum = 0.0, n = 0.0;
    for (const auto& b : field(cal, "metrics.calibration", "bins")) {
      const auto count = static_cast<double>(integer(b, "metrics.calibration.bins[]", "count"));
      if (count == 0) continue;
      conf_sum += count * number(b, "metrics.calibration.bins[]", "mean_confidence");
      n += count;
    }
    const double mean_conf = n > 0 ? conf_sum / n : 0.0;
    h += "<section class=\"card\"><h2>Calibration: does the model know when it is right?</h2><div "
         "class=\"cal\">" +
         reliability_svg(cal) + "<div><div class=\"big\" style=\"font-size:40px\">ECE " + pct(ece) +
         "</div><p class=\"sentence\">On average the model is " + pct(mean_conf) +
         " confident in its answers and right " + pct(acc.value) + " of the time: " +
         (mean_conf > acc.value + 0.02   ? "it is overconfident"
          : mean_conf < acc.value - 0.02 ? "it is underconfident"
                                         : "overall, confidence and accuracy agree") +
         ". The expected calibration error says that, weighted by the number of questions, a "
         "confidence "
         "bin&#39;s accuracy differs from its confidence by " +
         fmt("%.1f", 100.0 * ece) +
         " percentage points (0 is perfect).</p><div class=\"legend\"><span><i "
         "style=\"background:#2563a8\"></i>accuracy in the bin</span>"
         "<span><i style=\"background:#c2410c;opacity:.35\"></i>gap to confidence (what ECE "
         "averages)</span>"
         "<span><i class=\"dash\"></i>perfect calibration</span>"
         "<span><i style=\"background:#a3acb9\"></i>questions per bin</span></div><p "
         "class=\"note\">A probability from "
         "an uncalibrated model should not be read as the chance that the answer is "
         "correct.</p></div></div></section>\n";
  }

  h += "<section class=\"card\"><h2>Provenance</h2><table class=\"prov\">\n" +
       provenance_rows(provenance) + "</table></section>\n";
  h += "<section class=\"card methods\"><h2>Methods</h2><ul>"
       "<li>Accuracy: share of questions whose chosen option is the gold answer; an unanswered "
       "question counts as wrong.</li>"
       "<li>95% confidence intervals: Wilson score interval, z = 1.959964.</li>"
       "<li>Letter-prior baseline: accuracy of always answering the most frequent gold letter in "
       "this question set. "
       "The warning appears when the lower end of the model&#39;s interval is at or below it.</li>"
       "<li>Calibration: expected calibration error over 10 equal-width bins (lo, hi] of the "
       "maximum option "
       "probability, |accuracy &minus; mean confidence| weighted by bin size (Guo et al., "
       "2017).</li>"
       "<li>Comparing two runs on the same questions: exact McNemar test on the discordant pairs "
       "(docs/evaluation.md).</li></ul></section>\n";
  return h + "</main></body></html>\n";
}

}  // namespace medtune::eval
