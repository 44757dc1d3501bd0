// libFuzzer target: the server's JSON request decoding (decode_chat_request and
// decode_completion_request) on arbitrary bytes must either return a request or throw ApiError
// with status 400. Anything else (a crash, a sanitizer report, nlohmann's exceptions, an
// allocation past -malloc_limit_mb) is a bug. A returned request must hold what request.h and the
// limits promise: n, stop strings, top_logprobs, max_tokens and token ids within their bounds.
// The HTTP parsing in front of it is cpp-httplib's (Debian's libcpp-httplib, fuzzed upstream
// under OSS-Fuzz); this target covers the code that is ours.
// Seed corpus: fuzz/corpus/serve_request/. How to build and run: fuzz/README.md.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "serve/request.h"

namespace {

constexpr int64_t kVocab = 49152;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_serve_request: %s\n", what);
  std::abort();
}

void check_sampling(const medtune::serve::SamplingRequest& s, const medtune::serve::RequestLimits& lim) {
  if (s.n < 1 || s.n > lim.max_n) broken("n out of range");
  if (static_cast<int64_t>(s.stop.size()) > lim.max_stop) broken("too many stop strings");
  for (const auto& st : s.stop)
    if (st.empty() || static_cast<int64_t>(st.size()) > lim.max_stop_bytes) broken("stop string size");
  if (s.max_tokens && (*s.max_tokens < 0 || *s.max_tokens > lim.max_tokens)) broken("max_tokens out of range");
  if (!(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p >= 0 && s.top_p <= 1)) broken("sampling range");
  if (s.include_usage && !s.stream) broken("include_usage without stream");
  if (!(std::fabs(s.presence_penalty) <= 2) || !(std::fabs(s.frequency_penalty) <= 2))
    broken("penalty range");
  for (size_t i = 0; i < s.logit_bias.size(); ++i) {
    const auto [id, bias] = s.logit_bias[i];
    if (id < 0 || id >= kVocab || (i > 0 && id <= s.logit_bias[i - 1].first))
      broken("logit_bias ids");
    if (!(std::fabs(bias) <= 100)) broken("logit_bias range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const medtune::serve::RequestLimits lim;
  try {
    const auto r = medtune::serve::decode_chat_request(body, lim, kVocab);
    if (r.messages.empty() || static_cast<int64_t>(r.messages.size()) > lim.max_messages) broken("messages count");
    for (const auto& m : r.messages)
      if (m.role != "system" && m.role != "user" && m.role != "assistant") broken("role");
    if (r.top_logprobs < 0 || r.top_logprobs > lim.max_top_logprobs || (r.top_logprobs > 0 && !r.logprobs))
      broken("top_logprobs");
    if (r.sampling.max_tokens && *r.sampling.max_tokens < 1) broken("chat max_tokens < 1");
    check_sampling(r.sampling, lim);
  } catch (const medtune::serve::ApiError& e) {
    if (e.status() != 400) broken("chat: an ApiError other than 400");
  }
  try {
    const auto r = medtune::serve::decode_completion_request(body, lim, kVocab);
    if (r.prompt_count() == 0 || (!r.prompts.empty() && !r.prompt_ids.empty())) broken("prompt forms");
    if (static_cast<int64_t>(r.prompt_count()) > lim.max_prompts) broken("prompt count");
    for (const auto& ids : r.prompt_ids) {
      if (ids.empty()) broken("empty token prompt");
      for (int32_t id : ids)
        if (id < 0 || id >= kVocab) broken("token id outside the vocabulary");
    }
    if (r.logprobs && (*r.logprobs < 0 || *r.logprobs > lim.max_top_logprobs)) broken("logprobs");
    if (r.sampling.max_tokens && *r.sampling.max_tokens == 0 && !r.echo) broken("max_tokens 0 without echo");
    check_sampling(r.sampling, lim);
  } catch (const medtune::serve::ApiError& e) {
    if (e.status() != 400) broken("completion: an ApiError other than 400");
  }
  return 0;
}
