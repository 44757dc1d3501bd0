// libFuzzer target: parse_safetensors on arbitrary bytes must either succeed with every tensor
// inside the buffer, or throw BadInput. Anything else (crash, sanitizer report, other exception)
// is a bug. Seed corpus: fuzz/corpus/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = medtune::MappedFile::from_bytes("fuzz.safetensors",
                                               std::vector<uint8_t>(data, data + size));
  try {
    medtune::io::SafetensorsFile f = medtune::io::parse_safetensors(file);
    // Touch the first and last byte of every tensor so ASan sees any view outside the buffer.
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : f.tensors) {
      if (t.nbytes == 0) continue;
      const uint8_t* begin = file->data();
      if (t.data < begin || t.data + t.nbytes > begin + file->size()) std::abort();
      sink = static_cast<uint8_t>(sink ^ t.data[0] ^ t.data[t.nbytes - 1]);
    }
    (void)sink;
  } catch (const medtune::BadInput&) {
    // Expected for malformed input.
  }
  return 0;
}
