// libFuzzer target: read_mcq_jsonl on arbitrary bytes (a JSON Lines file of multiple-choice
// questions), with skip_invalid false and true, must either return a set or throw BadInput.
// Anything else (a crash, a sanitizer report, nlohmann's exceptions, std::out_of_range, an
// allocation past -malloc_limit_mb) is a bug. A returned set must also hold what medqa.h promises:
// at least one item, every item with num_options options (2..26) and its answer among them; and
// skipping can only ever accept what the strict read accepts, plus skipped records.
// Seed corpus: fuzz/corpus/mcq_jsonl/. How to build and run: fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "core/error.h"
#include "eval/medqa.h"
#include "memfd_file.h"

namespace {

constexpr const char* kName = "fuzz_mcq_jsonl";

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "%s: %s\n", kName, what);
  std::abort();
}

std::optional<medtune::eval::McqSet> read(const std::string& path, bool skip_invalid) {
  try {
    medtune::eval::McqSet set = medtune::eval::read_mcq_jsonl(path, skip_invalid);
    if (set.items.empty()) broken("a returned set has no items");
    if (set.num_options < 2 || set.num_options > 26) broken("num_options out of 2..26");
    if (set.skipped != static_cast<int64_t>(set.skip_reasons.size()))
      broken("skipped does not match skip_reasons");
    if (!skip_invalid && set.skipped != 0) broken("records skipped without skip_invalid");
    for (const medtune::eval::McqItem& item : set.items) {
      if (static_cast<int>(item.options.size()) != set.num_options)
        broken("an item's option count differs from num_options");
      if (item.answer < 0 || item.answer >= set.num_options) broken("answer out of range");
    }
    return set;
  } catch (const medtune::BadInput&) {
    return std::nullopt;  // expected for malformed input
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static medtune::fuzz::MemfdFile input;
  const std::string& path = input.write(data, size);
  const auto strict = read(path, false);
  const auto lenient = read(path, true);
  // Whatever the strict read accepts, the lenient one accepts identically (nothing to skip).
  if (strict) {
    if (!lenient) broken("skip_invalid rejects a file the strict read accepts");
    if (lenient->items.size() != strict->items.size() || lenient->skipped != 0)
      broken("skip_invalid reads a valid file differently");
  }
  return 0;
}
