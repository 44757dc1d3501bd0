// The list of every op-test group and the loop that runs them (op_test.h).
#include <chrono>
#include <exception>

#include "op_test.h"

namespace medtune::gpu_test {

void register_all_cases(Registry& r) {
  register_runtime_cases(r);
  register_embedding_cases(r);
  register_rmsnorm_cases(r);
  register_rope_cases(r);
  register_swiglu_cases(r);
  register_cross_entropy_cases(r);
  register_adamw_cases(r);
  register_dequantize_cases(r);
  register_convert_cases(r);
  register_attention_cases(r);
  register_gemm_cases(r);
  register_gemv_cases(r);
  register_elementwise_cases(r);
}

namespace {
template <typename Run>
CaseResult run_one(const std::string& name, Run&& run) {
  Checks checks;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run(checks);
  } catch (const std::exception& e) {
    checks.record(false, std::string("exception: ") + e.what());
  }
  CaseResult res;
  res.name = name;
  res.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  res.ok = checks.passed() && !checks.lines().empty();
  res.lines = checks.lines();
  return res;
}
}  // namespace

std::vector<CaseResult> run_host_cases(const Registry& r, const std::function<void(const CaseResult&)>& on_result) {
  std::vector<CaseResult> results;
  for (const auto& c : r.host_cases()) {
    CaseResult res = run_one(c.name, c.run);
    if (on_result) on_result(res);
    results.push_back(std::move(res));
  }
  return results;
}

std::vector<CaseResult> run_cases(const Registry& r, bool quick, const std::string& filter,
                                  const gpu::Stream& stream,
                                  const std::function<void(const CaseResult&)>& on_result) {
  std::vector<CaseResult> results;
  for (const auto& c : r.cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    if (quick && !c.quick) continue;
    CaseResult res = run_one(c.name, [&](Checks& checks) { c.run(checks, stream); });
    if (on_result) on_result(res);
    results.push_back(std::move(res));
  }
  return results;
}

}  // namespace medtune::gpu_test
