// write tmp -> fsync(tmp) -> rename(tmp, path) -> fsync(dir). The order matters: without the
// first fsync the rename can reach the disk before the data (ext4 with delalloc, xfs), leaving an
// empty or partial file under the final name after a crash; without the directory fsync the
// rename itself may be lost, leaving the old file (or none).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace medtune::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes the descriptor and removes the temporary file unless released: every early exit
// (exception included) leaves no stray `.tmp` behind.
class TempFile {
 public:
  TempFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  // close() reports deferred write errors (NFS, quota), so its result is checked, not ignored.
  void close_checked() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Internal(path_ + ": close failed: " + errno_text(errno));
  }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

void write_all(int fd, const std::string& path, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Internal(path + ": write failed: " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& file_path) {
  std::filesystem::path dir = std::filesystem::path(file_path).parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw Internal(dir.string() + ": cannot open directory to fsync: " + errno_text(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // Some file systems (and /proc-like mounts) cannot fsync a directory; the data is already
  // durable and the rename done, so only real I/O errors count.
  if (rc != 0 && err != EINVAL && err != ENOTSUP)
    throw Internal(dir.string() + ": fsync of directory failed: " + errno_text(err));
}

}  // namespace

void atomic_write_file(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    // The user chose the destination: a missing directory or a read-only location is theirs to fix.
    if (err == ENOENT || err == ENOTDIR || err == EACCES || err == EROFS || err == EISDIR)
      throw BadInput(path + ": cannot create " + tmp + ": " + errno_text(err));
    throw Internal(path + ": cannot create " + tmp + ": " + errno_text(err));
  }
  TempFile guard(tmp, fd);
  for (const auto& piece : pieces) write_all(fd, tmp, piece.data(), piece.size());
  if (::fsync(fd) != 0) throw Internal(tmp + ": fsync failed: " + errno_text(errno));
  guard.close_checked();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    if (err == EISDIR || err == EACCES || err == EROFS)
      throw BadInput(path + ": cannot replace with " + tmp + ": " + errno_text(err));
    throw Internal(path + ": rename from " + tmp + " failed: " + errno_text(err));
  }
  guard.commit();
  fsync_dir(path);
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  const std::span<const uint8_t> one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  atomic_write_file(path, std::span<const std::span<const uint8_t>>(&one, 1));
}

}  // namespace medtune::io
