// libFuzzer target: raw bytes as an HTTP/1.1 connection to a server set up as `medtune serve`
// sets up its cpp-httplib server (body limit, API-key check before routing, the two completion
// routes feeding the request decoders), so that what a client can send reaches the same parser
// and the same JSON decoding. Requirement: no crash, no sanitizer report, and every answered
// request gets a status the server may send (2xx, 400, 401, 404, 405, 413, 414, 431...), never
// a 5xx from the decoders.
// The parser is Debian's compiled libcpp-httplib (not instrumented here, so libFuzzer's coverage
// guidance sees only medtune's side; upstream fuzzes it under OSS-Fuzz): this target runs it on
// the inputs medtune's server meets. Seed corpus: fuzz/corpus/http_request/ (fuzz/README.md).
#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "serve/api_error.h"
#include "serve/auth.h"
#include "serve/request.h"

namespace {

constexpr int64_t kVocab = 49152;
const char* const kKey = "fuzz-key";

// One connection's bytes: reads come from the input, writes are dropped.
class BytesStream final : public httplib::Stream {
 public:
  BytesStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool is_readable() const override { return pos_ < size_; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t n) override {
    const size_t k = std::min(n, size_ - pos_);
    std::memcpy(ptr, data_ + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char*, size_t n) override { return static_cast<ssize_t>(n); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 50000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

[[noreturn]] void broken(const char* what, int status) {
  std::fprintf(stderr, "fuzz_http_request: %s (status %d)\n", what, status);
  std::abort();
}

class FuzzServer : public httplib::Server {
 public:
  FuzzServer() {
    set_payload_max_length(4 << 20);  // ServerOptions::max_body_bytes
    set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "GET" && (req.path == "/" || req.path == "/health")) return HandlerResponse::Unhandled;
      if (medtune::serve::bearer_matches(req.get_header_value("Authorization"), kKey)) return HandlerResponse::Unhandled;
      res.status = 401;
      return HandlerResponse::Handled;
    });
    const medtune::serve::RequestLimits lim;
    Post("/v1/chat/completions", [lim](const httplib::Request& req, httplib::Response& res) {
      try {
        medtune::serve::decode_chat_request(req.body, lim, kVocab);
        res.status = 200;
      } catch (const medtune::serve::ApiError& e) {
        res.status = e.status();
      }
    });
    Post("/v1/completions", [lim](const httplib::Request& req, httplib::Response& res) {
      try {
        medtune::serve::decode_completion_request(req.body, lim, kVocab);
        res.status = 200;
      } catch (const medtune::serve::ApiError& e) {
        res.status = e.status();
      }
    });
    Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    set_logger([](const httplib::Request&, const httplib::Response& res) {
      if (res.status >= 500 || res.status < 100) broken("a status the server must not send", res.status);
    });
  }
  // Up to 8 keep-alive requests from one connection, as a client may send.
  void serve(const uint8_t* data, size_t size) {
    BytesStream s(data, size);
    for (int i = 0; i < 8 && s.is_readable(); ++i) {
      bool closed = false;
      if (!process_request(s, false, closed, nullptr) || closed) break;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzServer server;
  server.serve(data, size);
  return 0;
}
