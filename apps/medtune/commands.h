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
void add_verify_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// Exit codes (README.md, "Exit codes"). 0, 1 and 2 are main()'s; the others belong to one command
// each and say something a script wants to tell apart from bad input.
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitVerifyMismatch = 3;  // medtune verify: a file no longer matches its manifest
constexpr int kExitDiverged = 4;        // medtune train: the loss or gradients became NaN/Inf

// Thrown by an action that has already said what went wrong and only needs main() to exit with
// `code` (e.g. `medtune verify` finding files that no longer match: kExitVerifyMismatch).
struct ExitWith {
  int code;
};

}  // namespace medtune::cli
