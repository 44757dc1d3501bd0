// medtune generate MODEL -p TEXT [--chat] [--system S] [--adapter DIR] [-n N] [--temperature T]
//                  [--top-k K] [--top-p P] [--seed S] [--presence-penalty P]
//                  [--frequency-penalty F] [--logit-bias ID+B ...] [--stop TEXT ...]
//                  [--device cpu|gpu|gpu:N] [--precision fp32|bf16|int8|auto] [--json] [-q]
// Streams the answer to stdout as it is produced, never splitting a UTF-8 character, then prints
// the prompt and decode timings and why it stopped on stderr (as llama.cpp prints its timings).
// With --json, prints one JSON object instead: the text, the tokens, the stop reason and the timings.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "adapter_loading.h"
#include "device_memory.h"
#include "cli_checks.h"
#include "commands.h"
#include "backend/backend.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/weight_check.h"
#include "model_files.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/utf8.h"

namespace medtune::cli {

namespace {

double per_second(int64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

// The names llama-server uses in its "timings" object where it has one.
nlohmann::json timings_json(const model::GenerateStats& s) {
  return {{"prompt_n", s.prompt_tokens},
          {"prompt_ms", s.prompt_seconds * 1e3},
          {"prompt_per_second", per_second(s.prompt_tokens, s.prompt_seconds)},
          {"first_token_ms", s.first_token_seconds * 1e3},
          {"predicted_n", s.decode_passes},
          {"predicted_ms", s.decode_seconds * 1e3},
          {"predicted_per_second", per_second(s.decode_passes, s.decode_seconds)}};
}

std::string timings_line(const model::GenerateStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prompt %lld tokens in %.1f ms (%.1f tokens/s); first token after %.1f ms; "
                "decode %lld tokens in %.1f ms (%.1f tokens/s)",
                static_cast<long long>(s.prompt_tokens), s.prompt_seconds * 1e3,
                per_second(s.prompt_tokens, s.prompt_seconds), s.first_token_seconds * 1e3,
                static_cast<long long>(s.decode_passes), s.decode_seconds * 1e3,
                per_second(s.decode_passes, s.decode_seconds));
  return buf;
}

// llama.cpp's --logit-bias form, one token each: its id and a signed bias, "15043+1" or
// "15043-100"; the bias within OpenAI's [-100, 100], the id within the model's vocabulary.
std::vector<std::pair<int32_t, float>> parse_logit_biases(const std::vector<std::string>& specs,
                                                          int64_t vocab) {
  std::vector<std::pair<int32_t, float>> out;
  for (const std::string& spec : specs) {
    const size_t sign = spec.find_first_of("+-");
    const std::string id_text = spec.substr(0, sign);
    const bool id_ok = !id_text.empty() && id_text.size() <= 10 &&
                       id_text.find_first_not_of("0123456789") == std::string::npos;
    char* end = nullptr;
    const double bias = sign == std::string::npos ? std::numeric_limits<double>::quiet_NaN()
                                                  : std::strtod(spec.c_str() + sign, &end);
    if (!id_ok || sign == std::string::npos || *end != '\0' || !(bias >= -100 && bias <= 100))
      throw BadInput("--logit-bias '" + spec +
                     "': expected TOKEN_ID followed by a signed bias from -100 to 100, as "
                     "llama.cpp's (15043+1, 15043-100)");
    const int64_t id = std::stoll(id_text);
    if (id >= vocab)
      throw BadInput("--logit-bias '" + spec + "': token id " + id_text +
                     " is outside the vocabulary (ids 0 to " + std::to_string(vocab - 1) +
                     "; `medtune tokenize MODEL TEXT` prints a text's ids)");
    for (const auto& [seen, b] : out)
      if (seen == id) throw BadInput("--logit-bias names token " + id_text + " twice");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return out;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string model, prompt, system, adapter;
    std::string base_quant = "none";  // --base-quant: see model::WeightQuant
    std::string device = "cpu";       // --device: backend::parse_device
    std::string precision = "auto";   // --precision: backend::parse_precision
    bool chat = false, check_tensors = false, json = false, quiet = false;
    int64_t max_new_tokens = 128, ctx_size = 0;
    model::SamplingParams sampling;
    std::vector<std::string> logit_bias;  // --logit-bias, checked against the vocabulary later
    std::vector<std::string> stop;        // --stop: the text ends before the first of these
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
  cmd->add_option("--device", args->device, "Where to compute: cpu | gpu | gpu:N (a GPU build; docs/gpu.md)")
      ->capture_default_str();
  cmd->add_option("--precision", args->precision, "Linear layers' arithmetic: fp32 | bf16 | int8 | auto (bf16 on a GPU; on the CPU int8 when the base is Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/NF4 and the CPU has AVX2, else fp32)")
      ->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", args->max_new_tokens, "Tokens to generate at most (capped by the context length)")->check(integer_in(1));
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy (default)")->check(number_in(0, 100));
  cmd->add_option("--top-k", args->sampling.top_k, "Sample among the k most likely tokens (0 = all)")->check(integer_in(0, INT32_MAX));
  cmd->add_option("--top-p", args->sampling.top_p, "Nucleus sampling threshold")->check(number_in(0, 1));
  cmd->add_option("--seed", args->sampling.seed, "Random seed for sampling")->check(integer_in(0));
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty,
                  "Subtracted once from the logit of every token generated before (OpenAI's "
                  "presence_penalty)")
      ->check(number_in(-2, 2));
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty,
                  "Subtracted from a token's logit once per time it was generated before (OpenAI's "
                  "frequency_penalty)")
      ->check(number_in(-2, 2));
  cmd->add_option("--logit-bias", args->logit_bias,
                  "TOKEN_ID+BIAS or TOKEN_ID-BIAS: added to that token's logit at every step "
                  "(repeatable; -100 bans it)");
  cmd->add_option("--stop", args->stop,
                  "End the answer before this text, which is not shown (repeatable; OpenAI's "
                  "stop)");
  cmd->add_option("-c,--ctx-size", args->ctx_size,
                  "Context length: prompt + generated tokens (default and maximum: the model's max_position_embeddings)")
      ->check(integer_in(1));
  cmd->add_flag("--check-tensors,!--no-check-tensors", args->check_tensors,
                "Check every weight for NaN/Inf before generating (reads the whole model once)");
  cmd->add_flag("--json", args->json,
                "Print one JSON object: text, token ids and pieces, stop reason, prompt/decode timings");
  cmd->add_flag("-q,--quiet", args->quiet, "No notes or timings on stderr");
  cmd->callback([args] {
    const backend::Device device = backend::parse_device(args->device, "--device");
    backend::parse_inference_precision(args->precision, device, false, "--precision");  // a bad value, refused before the model is read
    // The biases' form, refused before the model is read (their ids once it is).
    parse_logit_biases(args->logit_bias, std::numeric_limits<int64_t>::max());
    if (!args->system.empty() && !args->chat)
      throw BadInput("--system is a chat message: it needs --chat (without it the prompt is plain text)");
    for (const auto& [name, text] : {std::pair<const char*, const std::string*>{"--prompt", &args->prompt},
                                     std::pair<const char*, const std::string*>{"--system", &args->system}})
      if (tokenizer::sanitize_utf8(*text) != *text)
        throw BadInput(std::string(name) + ": not valid UTF-8 (the tokenizer would replace the invalid bytes with U+FFFD)");
    for (const std::string& stop : args->stop) {
      if (stop.empty())
        throw BadInput("--stop: an empty string would end every answer before it began");
      if (tokenizer::sanitize_utf8(stop) != stop)
        throw BadInput("--stop: not valid UTF-8 (the decoded answer can never contain it)");
    }
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
    // The context: llama.cpp's n_ctx. Positions past max_position_embeddings are outside what
    // RoPE was trained on: refused, not silently degraded.
    const int64_t max_pos = ckpt.config.max_position_embeddings;
    if (args->ctx_size > 0 && max_pos > 0 && args->ctx_size > max_pos)
      throw BadInput("--ctx-size " + std::to_string(args->ctx_size) + " is above the model's context (" +
                     std::to_string(max_pos) + " tokens, max_position_embeddings)");
    const int64_t n_ctx = args->ctx_size > 0 ? args->ctx_size : max_pos;
    const auto P = static_cast<int64_t>(prompt.size());
    int64_t max_new = args->max_new_tokens;
    if (n_ctx > 0) {
      if (P >= n_ctx)
        throw BadInput("the prompt is " + std::to_string(P) + " tokens: it leaves no room in the context of " +
                       std::to_string(n_ctx) + " tokens" + (args->ctx_size > 0 ? " (--ctx-size)" : " (max_position_embeddings)"));
      if (P + max_new > n_ctx) {
        max_new = n_ctx - P;
        if (!args->quiet) std::cerr << "medtune: note: -n " << args->max_new_tokens << " capped to " << max_new << " (prompt " << P
                  << " tokens + " << max_new << " = the context of " << n_ctx << " tokens)\n";
      }
    }
    if (args->check_tensors) model::check_weights_finite(ckpt);
    const model::WeightQuant quant = model::parse_weight_quant(args->base_quant, "--base-quant");
    const backend::Precision precision =
        backend::parse_inference_precision(args->precision, device, model::block_linears_take_int8(ckpt, quant), "--precision");
    backend::Backend& be = backend::for_device(device, precision);
    const std::vector<int64_t> stop_ids = stop_token_ids(ckpt, *tok);
    model::LlamaModel model(std::move(ckpt), quant, be);
    const auto lora = attach_adapter(model, args->adapter);
    // model::generate's cache (1 row of prompt + new tokens) and its largest pass (the prompt).
    const model::InferencePlan plan = check_device_memory(model, lora ? std::vector<const model::LoraWeights*>{lora.get()} : std::vector<const model::LoraWeights*>{},
                        {1, P + max_new, P, 1}, "generating", "the prompt's length or -n (--max-new-tokens)", args->quiet);
    model::GenerateOptions opt;
    opt.max_new_tokens = max_new;
    opt.sampling = args->sampling;
    opt.sampling.logit_bias = parse_logit_biases(args->logit_bias, model.config().vocab_size);
    opt.stop_ids = stop_ids;
    // Whole UTF-8 characters as they come, cut before the first --stop string.
    tokenizer::TextStream stream(*tok, args->stop);
    std::string text;
    model::GenerateStats stats;
    const std::vector<int32_t> out = model::generate(
        model, prompt, opt,
        [&](int32_t id) {
          const std::string piece = stream.push(id);
          text += piece;
          if (!args->json) std::cout << piece << std::flush;
          return !stream.stopped();
        },
        &stats);
    const std::string tail = stream.finish();
    text += tail;
    // Why it stopped, in words: an empty answer is most often the model choosing its
    // end-of-sequence token at once, which the text alone cannot show.
    std::string stop = "reached the limit of " + std::to_string(max_new) + " new tokens";
    std::string stop_reason(model::stop_reason_name(stats.stop));
    if (stream.stopped()) {
      stop = "the text reached the stop string " + nlohmann::json(stream.stopped_at()).dump() +
             " (--stop)";
      stop_reason = "stop_string";
    } else if (stats.stop == model::StopReason::kStopToken) {
      stop = "the model produced its stop token " + tok->token_piece(out.back()) + " (id " +
             std::to_string(out.back()) + ")";
    }
    if (args->json) {
      nlohmann::json j;
      j["text"] = text;
      j["token_ids"] = out;
      j["tokens"] = nlohmann::json::array();
      for (int32_t id : out) j["tokens"].push_back(tok->token_piece(id));
      j["stop_reason"] = stop_reason;
      j["stopped_by"] = stop;
      j["prompt_tokens"] = stats.prompt_tokens;
      j["completion_tokens"] = stats.new_tokens;
      j["timings"] = timings_json(stats);
      j["device"] = be.describe();
      j["precision"] = backend::precision_name(be.precision());
      if (be.device().is_cpu()) j["cpu_kernel_path"] = isa_name(active_isa());  // core/cpu_features.h
      // The plan against what the device held at its peak (its buffer cache included).
      if (!be.device().is_cpu())
        j["device_memory"] = {{"planned_bytes", plan.total()}, {"peak_bytes", be.peak_bytes()}};
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return;
    }
    std::cout << tail << "\n";
    if (!args->quiet)
      std::cerr << "medtune: stopped after " << stats.new_tokens << (stats.new_tokens == 1 ? " token" : " tokens")
                << ": " << stop << "\n"
                << "medtune: " << timings_line(stats) << "\n";
  });
}

}  // namespace medtune::cli
