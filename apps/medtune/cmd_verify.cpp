// medtune verify RUN_DIR: recomputes every digest in RUN_DIR/manifest.json (base model files, data
// files, configs, the adapter) and checks that the adapter carries the run's identity hash.
// Prints one line per check; exit 0 when everything matches, 3 when something no longer does,
// 2 when RUN_DIR holds no readable manifest. --json prints the same as one JSON object.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "train/run_manifest.h"

namespace medtune::cli {

void add_verify_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("verify", "Check a training run's files against its manifest (SHA-256)");
  cmd->add_option("run_dir", *run_dir, "Training output directory (holds manifest.json)")->required();
  cmd->add_flag("--json", *json, "Print one JSON object {run_dir, status, checked, changed, items}");
  cmd->callback([run_dir, json] {
    std::string status;
    const auto items = train::verify_run(*run_dir, &status);
    int bad = 0;
    if (*json) {
      nlohmann::json j{{"run_dir", *run_dir}, {"status", status}, {"items", nlohmann::json::array()}};
      for (const auto& it : items) {
        j["items"].push_back({{"subject", it.subject}, {"ok", it.problem.empty()}, {"problem", it.problem}});
        bad += it.problem.empty() ? 0 : 1;
      }
      j["checked"] = items.size();
      j["changed"] = bad;
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
      if (bad != 0) throw ExitWith{kExitVerifyMismatch};
      return;
    }
    for (const auto& it : items) {
      if (it.problem.empty()) {
        std::printf("ok       %s\n", it.subject.c_str());
      } else {
        ++bad;
        std::printf("CHANGED  %s: %s\n", it.subject.c_str(), it.problem.c_str());
      }
    }
    std::printf("%s: %zu checked, %d no longer match%s\n", run_dir->c_str(), items.size(), bad,
                bad == 0 ? "" : " (see CHANGED lines)");
    // Integrity is not success: say how the run ended, so an intact diverged or unfinished run is
    // not taken for a finished one.
    if (!status.empty())
      std::printf("run status: %s%s\n", status.c_str(),
                  status == "diverged"  ? " (no adapter was written; see manifest.json run.diverged)"
                  : status == "running" ? " (the run has not finished, or died: its adapter, if any, is not covered)"
                                        : "");
    std::fflush(stdout);
    if (bad != 0) throw ExitWith{kExitVerifyMismatch};
  });
}

}  // namespace medtune::cli
