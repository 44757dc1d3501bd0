#include "eval/compare.h"

#include <cstdarg>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/error.h"
#include "eval/metrics.h"
#include "eval/report_json.h"
#include "eval/stats.h"

namespace medtune::eval {

using nlohmann::json;

namespace {

// Up to five ids of `from` that `in` lacks, for the error message.
std::string missing_ids(const std::map<std::string, const QuestionResult*>& from,
                        const std::map<std::string, const QuestionResult*>& in, size_t* total) {
  std::string list;
  size_t shown = 0;
  *total = 0;
  for (const auto& [id, r] : from) {
    if (in.count(id)) continue;
    ++*total;
    if (shown++ < 5) list += (list.empty() ? "'" : ", '") + id + "'";
  }
  if (*total > 5) list += ", ...";
  return list;
}

__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
  char buf[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

}  // namespace

json compare_runs(const std::string& run_a, const std::string& run_b) {
  const auto a = read_predictions_jsonl(run_a);
  const auto b = read_predictions_jsonl(run_b);
  std::map<std::string, const QuestionResult*> by_id_a, by_id_b;
  for (const auto& r : a) by_id_a[r.id] = &r;
  for (const auto& r : b) by_id_b[r.id] = &r;
  size_t only_a = 0, only_b = 0;
  const std::string list_a = missing_ids(by_id_a, by_id_b, &only_a);
  const std::string list_b = missing_ids(by_id_b, by_id_a, &only_b);
  if (only_a || only_b) {
    std::string msg = "runs cover different questions:";
    // Appended piece by piece: "x" + std::to_string(..) trips GCC 12's false -Wrestrict.
    for (const auto& [count, run, list] :
         {std::tuple{only_a, run_a, list_a}, {only_b, run_b, list_b}}) {
      if (count == 0) continue;
      msg += ' ';
      msg += std::to_string(count);
      msg += " only in " + run + " (" + list + ");";
    }
    msg += " compare runs on the same question file";
    throw BadInput(msg);
  }
  int64_t right_a = 0, right_b = 0, ab = 0, a_only = 0, b_only = 0, neither = 0;
  for (const auto& [id, ra] : by_id_a) {
    const QuestionResult* rb = by_id_b.at(id);
    if (ra->gold != rb->gold)
      throw BadInput("question '" + id + "' has gold answer " +
                     std::string(1, char('A' + ra->gold)) + " in " + run_a + " but " +
                     std::string(1, char('A' + rb->gold)) + " in " + run_b +
                     ": the runs used different data");
    const bool ok_a = ra->pred == ra->gold;
    const bool ok_b = rb->pred == rb->gold;
    right_a += ok_a;
    right_b += ok_b;
    ab += ok_a && ok_b;
    a_only += ok_a && !ok_b;
    b_only += !ok_a && ok_b;
    neither += !ok_a && !ok_b;
  }
  const auto n = static_cast<int64_t>(by_id_a.size());
  Accuracy acc_a{right_a, n, static_cast<double>(right_a) / static_cast<double>(n),
                 wilson_interval(right_a, n)};
  Accuracy acc_b{right_b, n, static_cast<double>(right_b) / static_cast<double>(n),
                 wilson_interval(right_b, n)};
  const McNemarResult test = mcnemar_exact(a_only, b_only);
  return {{"a", {{"path", run_a}, {"accuracy", accuracy_json(acc_a)}}},
          {"b", {{"path", run_b}, {"accuracy", accuracy_json(acc_b)}}},
          {"n", n},
          {"difference", acc_b.value - acc_a.value},
          {"a_right_b_wrong", a_only},
          {"a_wrong_b_right", b_only},
          {"both_right", ab},
          {"both_wrong", neither},
          {"mcnemar",
           {{"statistic", test.statistic},
            {"p_value", test.p_value},
            {"method", "exact binomial, two-sided"}}}};
}

std::string render_comparison_text(const json& c) {
  std::string out;
  for (const char* run : {"a", "b"}) {
    const json& acc = c.at(run).at("accuracy");
    out += std::string(run[0] == 'a' ? "A" : "B") + "  " + c.at(run).at("path").get<std::string>() +
           "  " + std::to_string(acc.at("correct").get<int64_t>()) + "/" +
           std::to_string(acc.at("n").get<int64_t>()) +
           format("  %.1f%%  (95%% CI %.1f-%.1f%%)\n", 100.0 * acc.at("value").get<double>(),
                  100.0 * acc.at("ci95").at("lo").get<double>(),
                  100.0 * acc.at("ci95").at("hi").get<double>());
  }
  out += format("B - A: %+.1f points; ", 100.0 * c.at("difference").get<double>()) +
         "A right & B wrong: " + std::to_string(c.at("a_right_b_wrong").get<int64_t>()) +
         ", A wrong & B right: " + std::to_string(c.at("a_wrong_b_right").get<int64_t>()) + "\n";
  const double p = c.at("mcnemar").at("p_value").get<double>();
  out +=
      "exact McNemar test (two-sided): p = " + (p < 1e-4 ? format("%.2e", p) : format("%.4f", p)) +
      (p < 0.05 ? " (the runs differ at the 5% level)\n"
                : " (no evidence at the 5% level that the runs differ)\n");
  return out;
}

}  // namespace medtune::eval
