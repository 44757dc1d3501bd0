// libFuzzer target: read_chat_jsonl on arbitrary bytes (a JSON Lines file of conversations) must
// either return conversations or throw BadInput. Anything else (a crash, a sanitizer report,
// nlohmann's exceptions, std::out_of_range, an allocation past -malloc_limit_mb) is a bug. What it
// returns must hold what data.h promises: at least one conversation, each of at least two
// messages ending with an assistant message.
// Seed corpus: fuzz/corpus/chat_jsonl/. How to build and run: fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "memfd_file.h"
#include "train/data.h"

namespace {
constexpr const char* kName = "fuzz_chat_jsonl";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static medtune::fuzz::MemfdFile input;
  const std::string& path = input.write(data, size);
  try {
    const std::vector<medtune::train::ChatRecord> recs = medtune::train::read_chat_jsonl(path);
    if (recs.empty()) std::abort();
    for (const medtune::train::ChatRecord& r : recs)
      if (r.messages.size() < 2 || r.messages.back().role != "assistant" || r.source.empty())
        std::abort();
  } catch (const medtune::BadInput&) {
    // Expected for malformed input.
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
  return 0;
}
