// API keys: "Authorization: Bearer KEY" (what the OpenAI clients send), compared in constant time
// so that response timing reveals nothing about the key.
#pragma once

#include <string>

namespace medtune::serve {

// True when `header` is "Bearer <expected>". Both sides are hashed (SHA-256) and the digests
// compared with CRYPTO_memcmp: equal-length, data-independent timing, whatever the key length.
bool bearer_matches(const std::string& header, const std::string& expected);

// 127.0.0.1, ::1, localhost: addresses only this machine can reach.
bool is_loopback_host(const std::string& host);

}  // namespace medtune::serve
