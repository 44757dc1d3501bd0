// The HTTP side of `medtune serve` on cpp-httplib (what llama-server uses; Debian's
// libcpp-httplib-dev): routes, API-key check, limits, OpenAI-shaped errors, server-sent events,
// optional TLS. The OpenAI semantics live in Service.
#pragma once

#include <memory>
#include <string>

#include "model/llama.h"
#include "serve/adapters.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/service.h"

namespace httplib {
class Server;
}

namespace medtune::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (bound_port() says which)
  std::string api_key;               // empty: no key (allowed on loopback only)
  size_t max_body_bytes = 4 << 20;   // 413 beyond
  int max_connections = 64;          // connections served at once (HTTP threads); more wait in the backlog
  int io_timeout_seconds = 30;       // a client that sends or reads nothing for this long is dropped
  std::string tls_cert, tls_key;     // both: HTTPS
  bool quiet = false;                // no per-request log lines
};

class HttpServer {
 public:
  HttpServer(Service& service, Engine& engine, Metrics& metrics, AdapterRegistry& adapters,
             const model::LlamaModel& model, ServerOptions opt);
  ~HttpServer();

  // Binds (throws BadInput when the address or port cannot be bound); returns the port.
  int bind();
  // Serves until stop(); connections in flight are finished before it returns.
  void listen();
  // Stops accepting; /health answers 503 "draining" meanwhile. Safe from any thread.
  void stop();

 private:
  void routes();
  Service& service_;
  Engine& engine_;
  Metrics& metrics_;
  AdapterRegistry& adapters_;
  const model::LlamaModel& model_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> draining_{false};
};

}  // namespace medtune::serve
