// Subcommands of the `medtune` program. Each add_* registers its options and its action on the
// app; actions throw medtune::BadInput for bad input, which main() turns into exit code 2.
#pragma once

#include <CLI/CLI.hpp>

namespace medtune::cli {

void add_info_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);

}  // namespace medtune::cli
