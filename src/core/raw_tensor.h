// A tensor as stored in a checkpoint file: a typed, shaped view of mapped bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace medtune {

struct RawTensor {
  std::string name;            // name in the file (GGUF or HF naming, as the loader says)
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // PyTorch order: outermost first; the last dim is contiguous.
                               // (GGUF's ne[] is innermost first; loaders reverse it.)
  const uint8_t* data = nullptr;  // points into `file`'s mapping
  int64_t nbytes = 0;
  std::shared_ptr<MappedFile> file;  // keeps the mapping alive

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace medtune
