// libFuzzer target: GgufFile::parse (and checkpoint_from_gguf) on arbitrary bytes must either
// succeed with every tensor inside the buffer, or throw BadInput. Anything else (a crash, a
// sanitizer report, another exception, an allocation past -malloc_limit_mb) is a bug.
// Seed corpus: fuzz/corpus/gguf/. How to build and run: fuzz/README.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = medtune::MappedFile::from_bytes("fuzz.gguf", std::vector<uint8_t>(data, data + size));
  std::shared_ptr<medtune::io::GgufFile> g;
  try {
    g = std::make_shared<medtune::io::GgufFile>(medtune::io::GgufFile::parse(file));
  } catch (const medtune::BadInput&) {
    return 0;  // expected for malformed input
  }
  const uint8_t* begin = file->data();
  const uint8_t* end = begin + file->size();
  std::vector<float> row, x;
  volatile float sink = 0.0f;
  for (const auto& [name, t] : g->tensors()) {
    if (t.nbytes == 0) continue;
    if (t.data < begin || t.data + t.nbytes > end) std::abort();
    // Decode the first row (capped): ASan flags any read past what the parser vouched for.
    const int64_t ne0 = t.shape.back();
    const int64_t be = medtune::dtype_block_elems(t.dtype);
    const int64_t n = std::min<int64_t>(ne0, 4096) / be * be;
    if (n == 0) continue;
    if (medtune::dtype_row_bytes(t.dtype, n) > t.nbytes) std::abort();
    row.resize(static_cast<size_t>(n));
    x.assign(static_cast<size_t>(n), 1.0f);
    medtune::dequantize_row(t.dtype, t.data, row.data(), n);
    sink = sink + row[0] + medtune::dot_row(t.dtype, t.data, x.data(), n);
  }
  (void)sink;
  try {
    medtune::io::Checkpoint ck = medtune::io::checkpoint_from_gguf(g);
    if (ck.tensors.size() != g->tensors().size()) std::abort();
  } catch (const medtune::BadInput&) {
  }
  return 0;
}
