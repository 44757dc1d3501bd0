#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace medtune {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw BadInput(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw BadInput(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw BadInput(path + ": cannot mmap: " + std::strerror(e));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

std::shared_ptr<MappedFile> MappedFile::from_bytes(std::string name, std::vector<uint8_t> bytes) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->size_ = f->owned_.size();
  f->data_ = f->owned_.empty() ? nullptr : f->owned_.data();
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && owned_.empty()) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace medtune
