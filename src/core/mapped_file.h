// A read-only memory-mapped file. Model weights are used straight from the mapping: never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace medtune {

class MappedFile {
 public:
  // Throws BadInput naming the path when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  // Wraps bytes already in memory (fuzzers, tests): `name` stands in for the path in messages.
  static std::shared_ptr<MappedFile> from_bytes(std::string name, std::vector<uint8_t> bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> owned_;  // from_bytes: the bytes themselves (data_ points here, no mapping)
};

}  // namespace medtune
