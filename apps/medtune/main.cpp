// medtune: fine-tune and evaluate Llama-family models on clinical questions, on hardware you own.
// Exit codes (commands.h, README.md): 0 ok, 2 bad input or usage (the message names the file,
// field or argument), 1 internal error, 3 verify found a changed file, 4 training diverged.
#include <omp.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/suggest.h"
#include "dist/launch.h"

namespace {

// The first word that is neither an option of the program (-t N, --threads=N, --version, -h)
// nor one of its subcommands; nullopt when there is none or it is a known subcommand.
std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-t" || a == "--threads") {
      ++i;  // its value
      continue;
    }
    if (a.starts_with("-")) continue;
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->check_name(a)) return std::nullopt;
    return a;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"medtune " MEDTUNE_VERSION
               ": fine-tune and evaluate Llama-family models on clinical questions"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "medtune " MEDTUNE_VERSION);
  int threads = 0;
  app.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(medtune::cli::integer_in(0, 4096));
  medtune::cli::add_info_command(app);
  medtune::cli::add_tokenize_command(app);
  medtune::cli::add_generate_command(app);
  medtune::cli::add_train_command(app);
  medtune::cli::add_eval_command(app);
  medtune::cli::add_verify_command(app);
  medtune::cli::add_export_command(app);
  medtune::cli::add_doctor_command(app);
  medtune::cli::add_serve_command(app);
  app.parse_complete_callback([&] {
    if (threads > 0) omp_set_num_threads(threads);
  });
  try {
    // CLI11 reports an unknown first word as "A subcommand is required": name it and suggest.
    if (const auto unknown = unknown_subcommand(app, argc, argv)) {
      std::cerr << "medtune: unknown command '" << *unknown << "'";
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      if (const std::string guess = medtune::closest(*unknown, names); !guess.empty())
        std::cerr << "; did you mean '" << guess << "'?";
      std::cerr << "\ncommands:";
      for (const auto& n : names) std::cerr << " " << n;
      std::cerr << "\n";
      return medtune::cli::kExitBadInput;
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? medtune::cli::kExitOk : medtune::cli::kExitBadInput;
  } catch (const medtune::cli::ExitWith& e) {
    medtune::dist::finalize();  // every rank ends so (a diverged run diverges on all)
    return e.code;
  } catch (const medtune::BadInput& e) {
    // One rank of a job that fails alone must not leave the others waiting: it ends the job.
    // One write: the ranks of a job share mpirun's stderr, and pieces of two messages interleave.
    std::cerr << "medtune: " + medtune::dist::rank_prefix() + e.what() + "\n";
    medtune::dist::abort_job_if_distributed(medtune::cli::kExitBadInput);
    return medtune::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "medtune: " + medtune::dist::rank_prefix() + "internal error: " + e.what() + "\n";
    medtune::dist::abort_job_if_distributed(medtune::cli::kExitInternal);
    return medtune::cli::kExitInternal;
  }
  medtune::dist::finalize();
  return 0;
}
