// medtune tokenize MODEL TEXT [--json] [--no-special]
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "model_files.h"
#include "tokenizer/utf8.h"

namespace medtune::cli {

void add_tokenize_command(CLI::App& app) {
  struct Args {
    std::string model, text;
    bool json = false, no_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids and pieces of a text, as the model's tokenizer splits it");
  cmd->add_option("MODEL", args->model, "Hugging Face directory or .gguf file")->required();
  cmd->add_option("TEXT", args->text, "Text to tokenize")->required();
  cmd->add_flag("--json", args->json, "Print one JSON object {ids, pieces}");
  cmd->add_flag("--no-special", args->no_special, "Do not add BOS/EOS as the model's post-processor would");
  cmd->callback([args] {
    if (tokenizer::sanitize_utf8(args->text) != args->text)
      throw BadInput("TEXT: not valid UTF-8 (the tokenizer would replace the invalid bytes with U+FFFD)");
    const auto ckpt = io::open_checkpoint(args->model);
    const auto tok = open_tokenizer(ckpt);
    const auto ids = tok->encode(args->text, !args->no_special);
    if (args->json) {
      nlohmann::json j;
      j["ids"] = ids;
      j["pieces"] = nlohmann::json::array();
      for (int32_t id : ids) j["pieces"].push_back(tok->token_piece(id));
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return;
    }
    for (int32_t id : ids) std::cout << id << "\t" << tok->token_piece(id) << "\n";
    std::cout << ids.size() << " tokens\n";
  });
}

}  // namespace medtune::cli
