// medtune-parity [--device cpu|gpu|gpu:N] [--precision fp32|bf16|auto] FIXTURE_DIR...: compares
// medtune with the Hugging Face reference fixtures written by tools/make_reference.py and prints one
// JSON object per fixture. bf16 is held to train::bf16_tolerances, fp32 to the fp32 ones.
// Exit: 0 all implemented checks pass, 1 a check fails, 2 bad input.
#include <iostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "train/parity.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: medtune-parity [--device cpu|gpu|gpu:N] [--precision fp32|bf16|auto] FIXTURE_DIR...\n"
                 "  FIXTURE_DIR as written by tools/make_reference.py (base/, reference.safetensors, meta.json)\n"
                 "  --device: where the forward checks run (default cpu)\n"
                 "  --precision: their linear layers' arithmetic (default auto: bf16 on a GPU)\n";
    return argc < 2 ? 2 : 0;
  }
  std::string device = "cpu", precision = "auto";
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a.rfind("--device=", 0) == 0) device = a.substr(9);
    else if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a.rfind("--precision=", 0) == 0) precision = a.substr(12);
    else if (a.rfind("--", 0) == 0) {
      std::cerr << "medtune-parity: unknown option " << a << " (see --help)\n";
      return 2;
    } else dirs.push_back(a);
  }
  if (dirs.empty()) {
    std::cerr << "medtune-parity: no FIXTURE_DIR given (see --help)\n";
    return 2;
  }
  medtune::backend::Backend* be = nullptr;
  try {
    const auto d = medtune::backend::parse_device(device, "--device");
    be = &medtune::backend::for_device(d, medtune::backend::parse_precision(precision, d, "--precision"));
  } catch (const medtune::BadInput& e) {
    std::cerr << "medtune-parity: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {  // a device that cannot run this build (its warp size...)
    std::cerr << "medtune-parity: internal error: " << e.what() << "\n";
    return 1;
  }
  bool all_ok = true;
  for (const std::string& dir : dirs) {
    try {
      medtune::train::ParityTolerances tol;
      if (be->precision() == medtune::backend::Precision::kBf16)
        tol = medtune::train::bf16_tolerances(medtune::io::open_checkpoint(dir + "/base").config.num_hidden_layers);
      const auto result = medtune::train::check_parity(dir, tol, *be);
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
