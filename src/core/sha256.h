// SHA-256 digests for checksums and provenance (checkpoints, run manifests, report provenance).
// OpenSSL's libcrypto does the hashing: a well-kept, hardware-accelerated (SHA-NI) implementation
// that no hand-written one would beat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace medtune {

// Incremental hashing: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  // 64 lowercase hex digits. The object cannot be updated afterwards.
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so <openssl/evp.h> stays out of every includer
};

// Hex digest of bytes in memory.
std::string sha256_hex(std::string_view bytes);

// Hex digest of a file's contents, read in 1 MiB chunks (model files are many GB: never loaded
// whole). Throws BadInput naming the path when it cannot be opened or read.
std::string sha256_file_hex(const std::string& path);

}  // namespace medtune
