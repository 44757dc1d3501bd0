#include "serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "serve/auth.h"
#include "serve/chat_page.h"
#include "serve/peer_socket.h"

namespace medtune::serve {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kListenBacklog = 512;  // connections the kernel holds before accept(); capped by net.core.somaxconn
thread_local Clock::time_point request_start;  // set by the pre-routing handler of this connection's thread

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.body());
}

// The route as a metrics label: known routes by name, the rest as one label (a scanner's random
// paths must not grow the metrics without bound).
std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/adapters", "/health",
                        "/metrics", "/tokenize", "/detokenize", "/tokenizer_info", "/"})
    if (path == r) return r;
  return "other";
}

// 2xx-5xx reason as OpenAI's error type for statuses httplib produces itself.
ApiError error_for_status(int status, const std::string& path) {
  switch (status) {
    case 404: return ApiError(404, "invalid_request_error", "no route " + path.substr(0, 200) + "; the API is under /v1/", "", "not_found");
    case 405: return ApiError(405, "invalid_request_error", "method not allowed on " + path.substr(0, 200));
    case 413: return ApiError(413, "invalid_request_error", "the request body is larger than the server's limit (--max-body-bytes)", "", "request_too_large");
    case 414: return ApiError(414, "invalid_request_error", "the request URI is too long");
    case 400: return ApiError(400, "invalid_request_error", "malformed HTTP request");
    default: return ApiError(status, "server_error", "HTTP status " + std::to_string(status));
  }
}

}  // namespace

HttpServer::HttpServer(Service& service, Engine& engine, Metrics& metrics, AdapterRegistry& adapters,
                       const model::LlamaModel& model, ServerOptions opt)
    : service_(service), engine_(engine), metrics_(metrics), adapters_(adapters), model_(model), opt_(std::move(opt)) {
  if (!opt_.tls_cert.empty() || !opt_.tls_key.empty()) {
    if (opt_.tls_cert.empty() || opt_.tls_key.empty())
      throw BadInput("TLS needs both --ssl-cert-file and --ssl-key-file");
    auto ssl = std::make_unique<httplib::SSLServer>(opt_.tls_cert.c_str(), opt_.tls_key.c_str());
    if (!ssl->is_valid())
      throw BadInput("cannot use the TLS certificate " + opt_.tls_cert + " with the key " + opt_.tls_key +
                     " (unreadable, not PEM, or they do not match)");
    http_ = std::move(ssl);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  const int threads = opt_.max_connections;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(opt_.io_timeout_seconds, 0);
  http_->set_write_timeout(opt_.io_timeout_seconds, 0);
  http_->set_keep_alive_timeout(5);
  http_->set_tcp_nodelay(true);  // server-sent events: each token leaves at once
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  // Debian's libcpp-httplib 0.11.4 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
  // when the library was compiled): a burst of clients overflows it, and with SYN cookies the
  // kernel then resets connections. The listening socket is caught as it is created and listen()
  // is called again with a larger backlog (Linux updates it in place).
  int listen_fd = -1;
  http_->set_socket_options([&listen_fd](int sock) {
    listen_fd = sock;
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int port = opt_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(opt_.host);
    if (port < 0) throw BadInput("cannot bind " + opt_.host + " on any port");
  } else if (!http_->bind_to_port(opt_.host, port)) {
    throw BadInput("cannot bind " + opt_.host + ":" + std::to_string(port) +
                   " (in use, not an address of this machine, or a privileged port)");
  }
  if (listen_fd >= 0 && ::listen(listen_fd, kListenBacklog) != 0)
    throw Internal(std::string("listen(backlog ") + std::to_string(kListenBacklog) + "): " + std::strerror(errno));
  return port;
}

void HttpServer::listen() { http_->listen_after_bind(); }

void HttpServer::stop() {
  draining_ = true;
  http_->stop();
}

void HttpServer::routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_start = Clock::now();
    // The chat page and the health check are public; the page asks for the key itself.
    if (opt_.api_key.empty() || (req.method == "GET" && (req.path == "/" || req.path == "/health")))
      return httplib::Server::HandlerResponse::Unhandled;
    if (bearer_matches(req.get_header_value("Authorization"), opt_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "invalid_request_error",
                             "Incorrect API key provided: send it as 'Authorization: Bearer KEY'", "", "invalid_api_key"));
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 route, 413 body, 400 bad request line) get OpenAI's shape;
  // the handlers' own errors already have a body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, error_for_status(res.status, req.path));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "medtune serve: internal error on %s %s: %s\n", req.method.c_str(), req.path.c_str(), what.c_str());
    send_error(res, ApiError(500, "server_error", "internal server error (logged on the server)"));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double seconds = std::chrono::duration<double>(Clock::now() - request_start).count();
    metrics_.request_done(route_label(req.path), res.status, seconds);
    if (!opt_.quiet)
      std::fprintf(stderr, "medtune serve: %s %s %d %.3fs\n", req.method.c_str(), route_label(req.path).c_str(),
                   res.status, seconds);
  });

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
    res.set_content(chat_page_html(), "text/html; charset=utf-8");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) return send_json(res, 503, {{"status", "draining"}});
    send_json(res, 200, {{"status", "ok"}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.gauges()), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, service_.models()); });
  s.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, service_.tokenizer_info());
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json j = json::parse(req.body, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        throw invalid_request("expected {\"prompt\": string, \"add_special_tokens\": bool}", "prompt");
      const bool special = j.value("add_special_tokens", true);
      const auto ids = service_.tokenize(j["prompt"].get<std::string>(), special);
      send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.slot_size()}});
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const json::exception&) {
      send_error(res, invalid_request("add_special_tokens must be a boolean", "add_special_tokens"));
    }
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json j = json::parse(req.body, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
        throw invalid_request("expected {\"tokens\": [int, ...]}", "tokens");
      std::vector<int32_t> ids;
      for (const auto& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= service_.vocab_size())
          throw invalid_request("tokens must be ids in [0, " + std::to_string(service_.vocab_size()) + ")", "tokens");
        ids.push_back(t.get<int32_t>());
      }
      send_json(res, 200, {{"prompt", json(service_.detokenize(ids))}});
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });

  // Both completion routes: decode, prepare (400/404 before anything is sent), then one JSON body
  // or a stream of events.
  auto completion_route = [this](auto decode) {
    return [this, decode](const httplib::Request& req, httplib::Response& res) {
      try {
        if (draining_) throw ApiError(503, "server_shutting_down", "the server is shutting down");
        const PreparedRequest p = decode(req.body);
        res.set_header("X-Medtune-Provenance", service_.fingerprint(p));
        if (!p.sampling.stream) {
          // Nothing is written until the answer is whole, so a hang-up shows only on the socket.
          const PeerSocket peer = PeerSocket::find(req.local_port, req.remote_addr, req.remote_port);
          send_json(res, 200, service_.run(p, [&peer] { return peer.client_connected(); }));
          return;
        }
        engine_.check_room();  // a full queue is a 503 before the stream's 200 headers go out
        auto prepared = std::make_shared<PreparedRequest>(p);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [this, prepared](size_t, httplib::DataSink& sink) {
          service_.stream(*prepared, [&sink](std::string_view bytes) {
            return sink.is_writable() && sink.write(bytes.data(), bytes.size());
          });
          sink.done();
          return true;
        });
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    };
  };
  s.Post("/v1/chat/completions", completion_route([this](const std::string& body) {
           return service_.prepare(
               decode_chat_request(body, service_.limits(), service_.vocab_size()));
         }));
  s.Post("/v1/completions", completion_route([this](const std::string& body) {
           return service_.prepare(decode_completion_request(body, service_.limits(), service_.vocab_size()));
         }));

  // Loading an adapter at run time reads files named by the request: only with an API key.
  s.Post("/v1/adapters", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      if (opt_.api_key.empty())
        throw ApiError(403, "permission_error", "loading adapters over HTTP needs the server started with an API key");
      const json j = json::parse(req.body, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("path") ||
          !j["path"].is_string())
        throw invalid_request("expected {\"name\": string, \"path\": adapter directory on the server}");
      auto adapter = load_adapter(model_, j["name"].get<std::string>(), j["path"].get<std::string>());
      adapters_.add(adapter, service_.base().name);
      send_json(res, 200, {{"id", adapter->name}, {"object", "model"}, {"parent", service_.base().name}});
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const BadInput& e) {
      send_error(res, invalid_request(e.what(), "path"));
    }
  });
}

}  // namespace medtune::serve
