// For fuzz targets whose code under test takes a file path: the input bytes in an anonymous
// in-memory file (memfd), opened by path as "/proc/self/fd/N". One memfd per process, rewritten
// for every input, so nothing touches the disk and nothing is left behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace medtune::fuzz {

class MemfdFile {
 public:
  MemfdFile() : fd_(memfd_create("medtune_fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemfdFile(const MemfdFile&) = delete;
  MemfdFile& operator=(const MemfdFile&) = delete;
  ~MemfdFile() { close(fd_); }

  // Replaces the contents with data[0, size) and returns the path to open.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) fail("ftruncate");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }
  int fd_;
  std::string path_;
};

// libFuzzer reports an uncaught exception as a plain "deadly signal"; name it first.
[[noreturn]] inline void unexpected_exception(const char* target, const char* what) {
  std::fprintf(stderr, "%s: exception other than BadInput escaped: %s\n", target, what);
  std::abort();
}

}  // namespace medtune::fuzz
