// A file's bytes, for tests that compare what the code wrote (checkpoints, adapters) or read
// fixtures whole.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace medtune::testing {

// The whole file, binary; a file that cannot be opened fails the test and reads as "".
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace medtune::testing
