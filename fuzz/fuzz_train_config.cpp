// libFuzzer target: load_train_config on arbitrary bytes (a YAML training config) must either
// return a config or throw BadInput. Anything else (a crash, a sanitizer report, yaml-cpp's or
// nlohmann's exceptions, std::out_of_range, an allocation past -malloc_limit_mb) is a bug.
//
// Command-line overrides come from the input too: every line that starts with "#=" (a YAML comment,
// so the file still parses the same) is passed as the override after the "#=", e.g. "#=lora_r=16".
//
// An accepted config must also survive what `medtune train` does with it next: to_json(...).dump()
// (the run directory's config.json) and to_yaml, which load_train_config must read back to an equal
// config (warnings aside: they are not settings).
// Seed corpus: fuzz/corpus/train_config/. How to build and run: fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "memfd_file.h"
#include "train/train_config.h"

namespace {

constexpr const char* kName = "fuzz_train_config";
constexpr size_t kMaxOverrides = 8;

std::vector<std::string> overrides_of(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < kMaxOverrides) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (line.size() >= 2 && line[0] == '#' && line[1] == '=') out.emplace_back(line.substr(2));
    pos = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static medtune::fuzz::MemfdFile input, readback;
  const std::string& path = input.write(data, size);
  const std::vector<std::string> overrides =
      overrides_of(std::string_view(reinterpret_cast<const char*>(data), size));
  medtune::train::TrainConfig cfg;
  try {
    cfg = medtune::train::load_train_config(path, overrides);
  } catch (const medtune::BadInput&) {
    return 0;  // expected for malformed input
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
  // Accepted: the trainer writes it out as JSON and YAML; both must work, and the YAML must read
  // back to the same settings.
  try {
    volatile size_t sink = medtune::train::to_json(cfg).dump(2).size();
    (void)sink;
    cfg.warnings.clear();
    const std::string yaml = medtune::train::to_yaml(cfg);
    const std::string& back_path =
        readback.write(reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
    medtune::train::TrainConfig back = medtune::train::load_train_config(back_path);
    back.warnings.clear();
    if (!(back == cfg)) {
      std::fprintf(stderr, "%s: to_yaml does not read back to the same config:\n%s\n", kName,
                   yaml.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: an accepted config does not round-trip: %s\n", kName, e.what());
    std::abort();
  }
  return 0;
}
