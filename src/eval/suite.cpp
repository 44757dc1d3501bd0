#include "eval/suite.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "eval/compare.h"
#include "io/whole_file.h"

namespace medtune::eval {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> find_suite_files(const std::string& dir) {
  if (!fs::is_directory(dir)) throw BadInput("--data-dir " + dir + ": not a directory");
  std::vector<std::string> files, missing;
  for (const auto& task : open_medical_llm_tasks()) {
    std::vector<std::string> found;
    for (const char* ext : {".jsonl", ".json", ".csv"}) {
      const fs::path p = fs::path(dir) / (task.name + ext);
      if (fs::is_regular_file(p)) found.push_back(p.string());
    }
    if (found.size() > 1)
      throw BadInput("--data-dir " + dir + ": task " + task.name + " has more than one file (" + found[0] + ", " +
                     found[1] + "): keep one");
    if (found.empty()) missing.push_back(task.name + ".{jsonl,json,csv}");
    else files.push_back(found[0]);
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    throw BadInput("--data-dir " + dir + ": no data for " + std::to_string(missing.size()) + " of the " +
                   std::to_string(open_medical_llm_tasks().size()) + " tasks; expected files:" + list);
  }
  return files;
}

json suite_report(const std::vector<SuiteTaskResult>& results, const json& provenance) {
  json tasks = json::array();
  double sum = 0.0;
  for (const auto& r : results) {
    const auto& m = r.metrics;
    // The most common gold answer, named as the task's choice ("B", or pubmedqa's "yes").
    const std::vector<std::string> pubmedqa_choices{"yes", "no", "maybe"};
    const std::string answer = r.task->kind == TaskKind::pubmedqa ? pubmedqa_choices.at(static_cast<size_t>(m.prior.letter))
                                                                  : option_letter(m.prior.letter);
    tasks.push_back({{"task", r.task->name},
                     {"data", r.data},
                     {"n", m.count},
                     {"accuracy", accuracy_json(m.accuracy)},
                     {"majority_baseline", {{"answer", answer}, {"correct", m.prior.correct}, {"accuracy", m.prior.accuracy}}},
                     {"above_baseline", !m.indistinguishable_from_prior}});
    sum += m.accuracy.value;
  }
  return {{"format", "medtune-eval-suite"},
          {"format_version", 1},
          {"suite", kSuiteName},
          {"tasks", tasks},
          {"macro_accuracy", results.empty() ? 0.0 : sum / static_cast<double>(results.size())},
          {"macro_note", "the unweighted mean of the per-task accuracies, as the Open Medical-LLM Leaderboard averages"},
          {"provenance", provenance}};
}

namespace {

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", 100.0 * x);
  return buf;
}

const json& get(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw BadInput(where + ": missing field '" + key + "'");
  return j[key];
}

json read_suite(const std::string& dir) {
  const std::string path = (fs::path(dir) / kSuiteJsonName).string();
  const json j = io::read_json_file(path);
  const auto format = j.is_object() ? j.find("format") : j.end();
  if (format == j.end() || !format->is_string() || *format != "medtune-eval-suite")
    throw BadInput(path + ": not a medtune suite report (field 'format' is not 'medtune-eval-suite')");
  return j;
}

}  // namespace

std::string render_suite_markdown(const json& suite) {
  std::string s = "# Open Medical-LLM suite\n\n";
  s += "Zero-shot, metric acc, each task's prompt and choices as lm-evaluation-harness defines them.\n\n";
  s += "| task | n | accuracy | 95% CI (Wilson) | majority baseline |\n|---|---:|---:|---|---|\n";
  for (const auto& t : get(suite, "tasks", "suite")) {
    const json& acc = get(t, "accuracy", "suite.tasks[]");
    const json& base = get(t, "majority_baseline", "suite.tasks[]");
    s += "| " + t["task"].get<std::string>() + " | " + std::to_string(t["n"].get<int64_t>()) + " | " +
         pct(acc["value"].get<double>()) + "% | " + pct(acc["ci95"]["lo"].get<double>()) + "-" +
         pct(acc["ci95"]["hi"].get<double>()) + "% | " + pct(base["accuracy"].get<double>()) + "% (always " +
         base["answer"].get<std::string>() + ")" + (t.value("above_baseline", true) ? "" : "; the accuracy's CI reaches it") +
         " |\n";
  }
  s += "\n**Macro average: " + pct(get(suite, "macro_accuracy", "suite").get<double>()) + "%** (" +
       suite.value("macro_note", "") + ")\n";
  return s;
}

bool is_suite_run(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / kSuiteJsonName); }

std::vector<double> holm_adjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(m);
  double running = 0.0;
  for (size_t i = 0; i < m; ++i) {
    running = std::max(running, std::min(1.0, static_cast<double>(m - i) * p[order[i]]));
    out[order[i]] = running;
  }
  return out;
}

json compare_suites(const std::string& run_a, const std::string& run_b) {
  const json a = read_suite(run_a), b = read_suite(run_b);
  json tasks = json::array();
  std::vector<double> p;
  for (const auto& t : get(a, "tasks", run_a)) {
    const std::string name = get(t, "task", run_a + "/suite.json tasks[]").get<std::string>();
    const auto& tb = get(b, "tasks", run_b);
    if (std::none_of(tb.begin(), tb.end(), [&](const json& x) { return x.value("task", "") == name; }))
      throw BadInput(run_b + "/suite.json: has no task " + name + " (run A has it)");
    json c = compare_runs((fs::path(run_a) / name).string(), (fs::path(run_b) / name).string());
    c["task"] = name;
    p.push_back(c["mcnemar"]["p_value"].get<double>());
    tasks.push_back(std::move(c));
  }
  const auto adjusted = holm_adjust(p);
  for (size_t i = 0; i < tasks.size(); ++i) tasks[i]["p_holm"] = adjusted[i];
  const double ma = get(a, "macro_accuracy", run_a).get<double>(), mb = get(b, "macro_accuracy", run_b).get<double>();
  return {{"a", run_a},
          {"b", run_b},
          {"tasks", tasks},
          {"macro_accuracy", {{"a", ma}, {"b", mb}, {"difference", mb - ma}}},
          {"multiple_comparisons",
           "p_holm: Holm-Bonferroni adjusted p-values over the " + std::to_string(tasks.size()) +
               " tasks' exact McNemar tests (family-wise error rate); a task differs at level 0.05 only if its "
               "p_holm < 0.05, not its unadjusted p_value"}};
}

std::string render_suite_comparison_text(const json& c) {
  std::string s = "A  " + c["a"].get<std::string>() + "\nB  " + c["b"].get<std::string>() + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %6s %7s %7s %7s %9s %9s\n", "task", "n", "A", "B", "B-A", "p", "p_holm");
  s += line;
  for (const auto& t : c["tasks"]) {
    const double va = t["a"]["accuracy"]["value"].get<double>(), vb = t["b"]["accuracy"]["value"].get<double>();
    std::snprintf(line, sizeof line, "%-28s %6lld %6.1f%% %6.1f%% %+7.1f %9.4f %9.4f\n",
                  t["task"].get<std::string>().c_str(), static_cast<long long>(t["n"].get<int64_t>()), 100 * va,
                  100 * vb, 100 * (vb - va), t["mcnemar"]["p_value"].get<double>(), t["p_holm"].get<double>());
    s += line;
  }
  const auto& m = c["macro_accuracy"];
  std::snprintf(line, sizeof line, "macro average: A %.1f%%, B %.1f%% (B - A %+.1f points)\n",
                100 * m["a"].get<double>(), 100 * m["b"].get<double>(), 100 * m["difference"].get<double>());
  s += line;
  s += "exact McNemar per task (two-sided); " + c["multiple_comparisons"].get<std::string>() + "\n";
  return s;
}

}  // namespace medtune::eval
