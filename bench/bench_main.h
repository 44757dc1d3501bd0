// main() of a benchmark tool that loads files: a bad path or option value throws (medtune::BadInput
// names the file or field), which is said on stderr with the program's name and exit status 1
// instead of std::terminate's abort.
#pragma once

#include <cstdio>
#include <exception>

namespace medtune::bench {

inline int main_reporting_errors(const char* program, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace medtune::bench
