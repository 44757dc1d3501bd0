#include "serve/auth.h"

#include <openssl/crypto.h>

#include "core/sha256.h"

namespace medtune::serve {

bool bearer_matches(const std::string& header, const std::string& expected) {
  static const std::string kPrefix = "Bearer ";
  const std::string given = header.rfind(kPrefix, 0) == 0 ? header.substr(kPrefix.size()) : std::string();
  const std::string a = sha256_hex(given), b = sha256_hex(expected);
  // Evaluated whatever the prefix was: the comparison's time does not depend on the input.
  const bool same = CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
  return same && !expected.empty() && header.rfind(kPrefix, 0) == 0;
}

bool is_loopback_host(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host == "[::1]";
}

}  // namespace medtune::serve
