#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace medtune {

namespace {
EVP_MD_CTX* as_ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(as_ctx(ctx_), EVP_sha256(), nullptr) != 1)
    throw Internal("SHA-256: OpenSSL could not initialise a digest context");
}

Sha256::~Sha256() { EVP_MD_CTX_free(as_ctx(ctx_)); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (EVP_DigestUpdate(as_ctx(ctx_), bytes.data(), bytes.size()) != 1)
    throw Internal("SHA-256: digest update failed");
}

void Sha256::update(std::string_view text) {
  update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(as_ctx(ctx_), digest, &len) != 1 || len != 32)
    throw Internal("SHA-256: digest finalisation failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string sha256_file_hex(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw BadInput(path + ": cannot open for hashing: " + std::strerror(errno));
  Sha256 h;
  std::vector<uint8_t> buf(size_t{1} << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) h.update(std::span<const uint8_t>(buf.data(), n));
    if (n < buf.size()) {
      if (std::ferror(f.get())) throw BadInput(path + ": read error while hashing: " + std::strerror(errno));
      break;
    }
  }
  return h.hex();
}

}  // namespace medtune
