// SHA-256 against the FIPS 180-4 / NIST example vectors, and the file path against the in-memory
// path on a file larger than one read chunk.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "support/scratch_dir.h"

namespace medtune {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  Sha256 h;
  h.update("abcdbcdecdefdefgefgh");
  h.update("fghighijhijkijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(h.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FileEqualsMemoryAcrossChunks) {
  // One million 'a': the NIST long-message vector, and just under one 1 MiB read chunk; append
  // more so the file also spans a chunk boundary.
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string text = million + std::string(100000, 'b');
  const auto path = (medtune::testing::scratch_dir("sha256") / "test.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  EXPECT_EQ(sha256_file_hex(path), sha256_hex(text));
  std::filesystem::remove(path);
}

TEST(Sha256, MissingFileNamesThePath) {
  try {
    sha256_file_hex("/nonexistent/medtune/file.bin");
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/medtune/file.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace medtune
