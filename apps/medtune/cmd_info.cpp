// medtune info MODEL [--json] [--context N]
#include <iostream>
#include <memory>
#include <string>

#include "cli_checks.h"
#include "commands.h"
#include "io/checkpoint.h"
#include "model/model_info.h"

namespace medtune::cli {

void add_info_command(CLI::App& app) {
  struct Args {
    std::string model;
    bool json = false;
    int64_t context = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "Architecture, parameter count, dtypes and memory of a model");
  cmd->add_option("MODEL", args->model, "Hugging Face directory or .gguf file")->required();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option("--context", args->context, "Context length for the memory estimate (default: min(max_position_embeddings, 4096))")
      ->check(integer_in(1, 1 << 24));
  cmd->callback([args] {
    const auto ckpt = io::open_checkpoint(args->model);
    const auto info = model::describe(ckpt, args->context);
    if (args->json) {
      std::cout << model::to_json(info).dump(2) << "\n";
    } else {
      std::cout << model::to_text(info);
    }
  });
}

}  // namespace medtune::cli
