// medtune serve MODEL [--adapter NAME=DIR ...] [--host H] [--port P] [--api-key KEY | --api-key-file F]
//                     [-c N] [--parallel N] [--queue-size N] [--threads-http N] [--ssl-cert-file F --ssl-key-file F]
// An OpenAI-compatible HTTP server (src/serve/): /v1/chat/completions, /v1/completions, /v1/models,
// /health, /metrics and a chat page at /. Option names follow llama-server's where it has one.
// Binds 127.0.0.1 unless told otherwise, and refuses any other address without an API key.
// SIGTERM or SIGINT: stops accepting, finishes the requests in flight, exits 0.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "cli_checks.h"
#include "commands.h"
#include "device_memory.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/sha256.h"
#include "io/provenance.h"
#include "model/llama.h"
#include "model_files.h"
#include "serve/adapters.h"
#include "serve/auth.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/service.h"
#include "tokenizer/chat_template.h"

namespace medtune::cli {

namespace {

std::string read_api_key_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw BadInput("--api-key-file " + path + ": cannot be read");
  std::string key;
  std::getline(f, key);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  if (key.empty()) throw BadInput("--api-key-file " + path + ": the first line (the key) is empty");
  return key;
}

// The base model's identity: the SHA-256 of its file, or of a directory's files' digests.
std::string model_sha256(const std::string& path) {
  const auto digests = io::digest_files(io::model_files(path));
  if (digests.size() == 1) return digests[0].sha256;
  Sha256 h;
  for (const auto& d : digests) h.update(d.sha256 + "  " + std::filesystem::path(d.path).filename().string() + "\n");
  return h.hex();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  struct Args {
    std::string model, host = "127.0.0.1", api_key, api_key_file, alias, tls_cert, tls_key;
    std::vector<std::string> adapters;
    std::string base_quant = "none", device = "cpu", precision = "auto";
    int port = 8080, threads_http = 64, io_timeout = 30;
    int64_t ctx_size = 0, parallel = 4, queue_size = 64, max_body_bytes = 4 << 20, max_tokens = 0, max_n = 8;
    double request_timeout = 600;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, adapters per request)");
  cmd->add_option("MODEL", args->model, "Hugging Face directory or .gguf file")->required();
  cmd->add_option("--adapter", args->adapters,
                  "NAME=DIR: a PEFT LoRA adapter that requests select with \"model\": \"NAME\" (repeatable)");
  cmd->add_option("--host", args->host, "Address to bind; anything but loopback needs an API key")->capture_default_str();
  cmd->add_option("--port", args->port, "Port (0: any free port, printed at start)")->check(integer_in(0, 65535))->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Key clients must send as 'Authorization: Bearer KEY' (or MEDTUNE_API_KEY)");
  cmd->add_option("--api-key-file", args->api_key_file, "File whose first line is the API key");
  cmd->add_option("-a,--alias", args->alias, "Model name of the base in the API (default: MODEL's file name without .gguf)");
  cmd->add_option("-c,--ctx-size", args->ctx_size,
                  "KV cache positions in all, allocated at start and divided among the --parallel slots: a request's "
                  "prompt + answer may use ctx-size / parallel (default: parallel x min(model context, 4096))")
      ->check(integer_in(2));
  cmd->add_option("--parallel", args->parallel,
                  "Requests computed together (KV cache slots): their prompt and decode steps share forward passes")
      ->check(integer_in(1, 1024))->capture_default_str();
  cmd->add_option("--queue-size", args->queue_size, "Requests waiting or running at most; more get 503")
      ->check(integer_in(1, 100000))->capture_default_str();
  cmd->add_option("--threads-http", args->threads_http, "HTTP connections served at once")->check(integer_in(1, 4096))->capture_default_str();
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "Largest request body (413 beyond)")->check(integer_in(1024))->capture_default_str();
  cmd->add_option("--max-tokens", args->max_tokens, "Largest max_tokens a request may ask (default: the context)")->check(integer_in(1));
  cmd->add_option("--max-n", args->max_n, "Largest n (choices per prompt)")->check(integer_in(1, 128))->capture_default_str();
  cmd->add_option("--timeout", args->io_timeout, "Seconds a client may stay silent while sending or reading")
      ->check(integer_in(1, 86400))->capture_default_str();
  cmd->add_option("--request-timeout", args->request_timeout, "Seconds a request may run; then it ends with finish_reason length")
      ->check(number_in(0.001, 86400))->capture_default_str();
  cmd->add_option("--ssl-cert-file", args->tls_cert, "PEM certificate: serve HTTPS (with --ssl-key-file)");
  cmd->add_option("--ssl-key-file", args->tls_key, "PEM private key of --ssl-cert-file");
  cmd->add_option("--base-quant", args->base_quant, "Quantize the base's block linears at load: none | nf4")->capture_default_str();
  cmd->add_option("--device", args->device, "Where to compute: cpu | gpu | gpu:N (a GPU build; docs/gpu.md)")->capture_default_str();
  cmd->add_option("--precision", args->precision, "Linear layers' arithmetic: fp32 | bf16 | int8 | auto (bf16 on a GPU; on the CPU int8 when the base is Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/NF4 and the CPU has AVX2, else fp32)")->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "No per-request log lines on stderr");
  cmd->callback([args] {
    // Before any thread exists, so that every thread inherits the mask: SIGTERM/SIGINT are taken
    // by sigwait below only; a write to a closed socket must not kill the process.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    const backend::Device device = backend::parse_device(args->device, "--device");
    backend::parse_inference_precision(args->precision, device, false, "--precision");  // a bad value, refused before the model is read
    std::string key = args->api_key;
    if (!args->api_key_file.empty()) {
      if (!key.empty()) throw BadInput("give the API key once: --api-key or --api-key-file, not both");
      key = read_api_key_file(args->api_key_file);
    }
    if (key.empty())
      if (const char* env = std::getenv("MEDTUNE_API_KEY")) key = env;
    if (!serve::is_loopback_host(args->host) && key.empty())
      throw BadInput("--host " + args->host +
                     " can be reached from other machines: give an API key (--api-key, --api-key-file or the "
                     "MEDTUNE_API_KEY environment variable), or keep the default --host 127.0.0.1");

    auto ckpt = io::open_checkpoint(args->model);
    const auto tok = open_tokenizer(ckpt);
    std::unique_ptr<tokenizer::ChatTemplate> tmpl;
    try {
      const auto src = find_chat_template(ckpt);
      tmpl = std::make_unique<tokenizer::ChatTemplate>(src.text, src.origin);
    } catch (const BadInput& e) {
      if (!args->quiet) std::cerr << "medtune serve: note: no chat template (" << e.what() << "): /v1/chat/completions answers 400\n";
    }
    const int64_t max_pos = ckpt.config.max_position_embeddings;
    const int64_t np = args->parallel;
    if (args->ctx_size > 0 && args->ctx_size / np < 2)
      throw BadInput("--ctx-size " + std::to_string(args->ctx_size) + " leaves fewer than 2 positions to each of the " +
                     std::to_string(np) + " slots (--parallel " + std::to_string(np) + "): each request gets ctx-size / parallel");
    if (args->ctx_size > 0 && max_pos > 0 && args->ctx_size / np > max_pos)
      throw BadInput("--ctx-size " + std::to_string(args->ctx_size) + " / --parallel " + std::to_string(np) +
                     " gives each request more positions than the model's context (" + std::to_string(max_pos) +
                     " tokens, max_position_embeddings)");
    const int64_t ctx = args->ctx_size > 0 ? args->ctx_size : np * (max_pos > 0 ? std::min<int64_t>(max_pos, 4096) : 4096);
    const int64_t slot_ctx = ctx / np;

    serve::BaseModelInfo base;
    base.path = args->model;
    std::filesystem::path mp(args->model);
    if (!mp.has_filename()) mp = mp.parent_path();
    base.name = !args->alias.empty() ? args->alias : (mp.extension() == ".gguf" ? mp.stem().string() : mp.filename().string());
    base.sha256 = model_sha256(args->model);
    base.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

    const std::vector<int64_t> stop_ids = stop_token_ids(ckpt, *tok);
    const model::WeightQuant quant = model::parse_weight_quant(args->base_quant, "--base-quant");
    const backend::Precision precision =
        backend::parse_inference_precision(args->precision, device, model::block_linears_take_int8(ckpt, quant), "--precision");
    // With several slots, on the CPU, the batch-invariant kernels: a request's output does not
    // depend on its batch (docs/decisions/batch-invariant-serving.md). One slot never batches, so
    // it keeps the faster OpenBLAS / fused-dot kernels that generate and eval use.
    backend::Backend& device_be = backend::for_device(device, precision);
    backend::Backend& be = np > 1 ? backend::batch_invariant(device_be) : device_be;
    model::LlamaModel model(std::move(ckpt), quant, be);

    serve::AdapterRegistry adapters;
    for (const auto& a : args->adapters) {
      const auto [name, dir] = serve::parse_adapter_arg(a);
      adapters.add(serve::load_adapter(model, name, dir), base.name);
    }
    {
      // The engine's cache (every slot's positions) and its largest pass: the decodes of every
      // slot and prompt chunks up to serve::kBatchTokens, each row's logits asked for at most.
      std::vector<const model::LoraWeights*> loaded;
      for (const auto& a : adapters.list()) loaded.push_back(a->weights.get());
      const int64_t pass = std::max(serve::kBatchTokens, np);
      static_cast<void>(check_device_memory(model, loaded, {np, slot_ctx, pass, pass}, "serving",
                          "--ctx-size (" + std::to_string(ctx) + ") or --parallel (" + std::to_string(np) + ")", false));
    }
    serve::RequestLimits limits;
    limits.max_tokens = args->max_tokens > 0 ? std::min(args->max_tokens, slot_ctx) : slot_ctx;
    limits.max_n = args->max_n;
    serve::Engine engine(model, {ctx, np, args->queue_size});
    serve::Metrics metrics;
    serve::Service service(*tok, tmpl.get(), engine, adapters, metrics, base, limits);
    service.set_stop_ids(stop_ids);
    service.set_request_timeout(args->request_timeout);
    serve::ServerOptions so;
    so.host = args->host;
    so.port = args->port;
    so.api_key = key;
    so.max_body_bytes = static_cast<size_t>(args->max_body_bytes);
    so.max_connections = args->threads_http;
    so.io_timeout_seconds = args->io_timeout;
    so.tls_cert = args->tls_cert;
    so.tls_key = args->tls_key;
    so.quiet = args->quiet;
    serve::HttpServer server(service, engine, metrics, adapters, model, so);
    const int port = server.bind();

    std::thread signal_thread([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::cerr << "medtune serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
                << ": finishing the requests in flight, then exiting\n";
      server.stop();
    });
    std::cerr << "medtune serve: model " << base.name << " (sha256 " << base.sha256.substr(0, 16) << "...), "
              << adapters.list().size() << " adapter(s), " << np << " slot(s) of " << slot_ctx << " tokens (--parallel, --ctx-size "
              << ctx << "), KV cache "
              << engine.gauges().kv_bytes / (1 << 20) << " MiB, on " << be.describe() << "\n"
              << "medtune serve: listening on " << (so.tls_cert.empty() ? "http" : "https") << "://" << args->host << ":"
              << port << (key.empty() ? " (no API key: loopback only)" : " (API key required)") << std::endl;
    server.listen();
    signal_thread.join();
    engine.drain();
    std::cerr << "medtune serve: stopped\n";
  });
}

}  // namespace medtune::cli
