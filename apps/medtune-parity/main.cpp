// medtune-parity FIXTURE_DIR...: compares medtune with the Hugging Face reference fixtures
// written by tools/make_reference.py and prints one JSON object per fixture.
// Exit: 0 all implemented checks pass, 1 a check fails, 2 bad input.
#include <iostream>
#include <string>

#include "core/error.h"
#include "train/parity.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: medtune-parity FIXTURE_DIR [FIXTURE_DIR...]\n"
                 "  FIXTURE_DIR as written by tools/make_reference.py (base/, reference.safetensors, meta.json)\n";
    return argc < 2 ? 2 : 0;
  }
  bool all_ok = true;
  for (int i = 1; i < argc; ++i) {
    try {
      const auto result = medtune::train::check_parity(argv[i]);
      std::cout << result.report.dump() << "\n";
      all_ok = all_ok && result.ok;
    } catch (const medtune::BadInput& e) {
      std::cerr << "medtune-parity: " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "medtune-parity: internal error: " << e.what() << "\n";
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}
