// medtune generate MODEL -p TEXT [--chat] [--system S] [--adapter DIR] [-n N] [--temperature T] [--top-k K]
//                  [--top-p P] [--seed S]
// Streams the answer to stdout as it is produced, never splitting a UTF-8 character.
#include <iostream>
#include <memory>

#include "adapter_loading.h"
#include "commands.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model_files.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

namespace medtune::cli {

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string model, prompt, system, adapter;
    std::string base_quant = "none";  // --base-quant: see model::WeightQuant
    bool chat = false;
    int64_t max_new_tokens = 128;
    model::SamplingParams sampling;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Continue a prompt (or answer it with the chat template)");
  cmd->add_option("MODEL", args->model, "Hugging Face directory or .gguf file")->required();
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", args->chat, "Wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", args->system, "System message (with --chat)");
  cmd->add_option("--adapter", args->adapter, "PEFT LoRA adapter directory to apply");
  cmd->add_option("--base-quant", args->base_quant,
                  "Quantize the base's block linears at load: none | nf4 (bitsandbytes NF4, as QLoRA)")
      ->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", args->max_new_tokens, "Tokens to generate at most")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy (default)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->sampling.top_k, "Sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->sampling.top_p, "Nucleus sampling threshold")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->sampling.seed, "Random seed for sampling");
  cmd->callback([args] {
    auto ckpt = io::open_checkpoint(args->model);
    const auto tok = open_tokenizer(ckpt);
    std::vector<int32_t> prompt;
    if (args->chat) {
      const auto src = find_chat_template(ckpt);
      tokenizer::ChatTemplate tmpl(src.text, src.origin);
      std::vector<tokenizer::ChatMessage> messages;
      if (!args->system.empty()) messages.push_back({"system", args->system});
      messages.push_back({"user", args->prompt});
      const std::string bos = tok->bos_id() >= 0 ? tok->token_piece(tok->bos_id()) : "";
      const std::string eos = tok->eos_id() >= 0 ? tok->token_piece(tok->eos_id()) : "";
      // The template writes BOS itself where the model wants one: no post-processor tokens.
      prompt = tok->encode(tmpl.apply(messages, true, bos, eos), false);
    } else {
      prompt = tok->encode(args->prompt, true);
    }
    model::LlamaModel model(std::move(ckpt), model::parse_weight_quant(args->base_quant, "--base-quant"));
    const auto lora = attach_adapter(model, args->adapter);
    model::GenerateOptions opt;
    opt.max_new_tokens = args->max_new_tokens;
    opt.sampling = args->sampling;
    for (int64_t id : model.config().eos_token_ids) opt.stop_ids.push_back(id);
    if (tok->eos_id() >= 0) opt.stop_ids.push_back(tok->eos_id());
    tokenizer::StreamDecoder stream(*tok, /*skip_special=*/true);
    model::generate(model, prompt, opt, [&](int32_t id) {
      std::cout << stream.push(id) << std::flush;
      return true;
    });
    std::cout << stream.flush() << "\n";
  });
}

}  // namespace medtune::cli
