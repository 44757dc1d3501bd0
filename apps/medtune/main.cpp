// medtune: fine-tune and evaluate Llama-family models on clinical questions, on hardware you own.
// Exit codes: 0 ok, 2 bad input or usage (the message names the file, field or argument),
// 1 internal error.
#include <omp.h>

#include <iostream>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"medtune " MEDTUNE_VERSION
               ": fine-tune and evaluate Llama-family models on clinical questions"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "medtune " MEDTUNE_VERSION);
  int threads = 0;
  app.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  medtune::cli::add_info_command(app);
  medtune::cli::add_tokenize_command(app);
  medtune::cli::add_generate_command(app);
  medtune::cli::add_train_command(app);
  medtune::cli::add_eval_command(app);
  medtune::cli::add_verify_command(app);
  medtune::cli::add_export_command(app);
  medtune::cli::add_doctor_command(app);
  app.parse_complete_callback([&] {
    if (threads > 0) omp_set_num_threads(threads);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const medtune::cli::ExitWith& e) {
    return e.code;
  } catch (const medtune::BadInput& e) {
    std::cerr << "medtune: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "medtune: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
