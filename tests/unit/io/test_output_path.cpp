// Output locations are checked before any work: files where directories are wanted (and the
// reverse), virtual file systems and missing parents are bad input naming the path and option.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/output_path.h"
#include "support/bad_input.h"

namespace medtune::io {
namespace {

using medtune::testing::bad_input_message;

namespace fs = std::filesystem;

class OutputPath : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test and process: CTest runs the tests of this file in parallel.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("medtune_test_output_path_" + std::string(info->name()) +
                                        "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "file") << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OutputPath, DirectoryChecks) {
  const std::string file = (dir_ / "file").string();
  EXPECT_EQ(bad_input_message([&] { check_output_dir(file, "--out"); }),
            "--out " + file + ": exists and is not a directory");
  EXPECT_NE(bad_input_message([&] {
              check_output_dir(file + "/sub", "--out");
            }).find("is not a directory"),
            std::string::npos);
  EXPECT_EQ(bad_input_message([&] {
              check_output_dir("/proc/x", "output_dir");
            }).rfind("output_dir /proc/x: is under /proc", 0),
            0u);
  EXPECT_EQ(bad_input_message([&] {
              check_output_dir("/sys", "output_dir");
            }).rfind("output_dir /sys: is under /sys", 0),
            0u);
  EXPECT_NE(bad_input_message([&] { check_output_dir("", "--out"); }).find("empty path"),
            std::string::npos);
  // Checking creates nothing; preparing creates the directory and its parents.
  const fs::path nested = dir_ / "a" / "b";
  check_output_dir(nested.string(), "--out");
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  prepare_output_dir(nested.string(), "--out");
  EXPECT_TRUE(fs::is_directory(nested));
  prepare_output_dir(nested.string(), "--out");  // an existing directory is fine
}

TEST_F(OutputPath, FileChecks) {
  const std::string file = (dir_ / "file").string();
  check_output_file(file, "-o");  // an existing file may be replaced: the caller decides
  check_output_file((dir_ / "new.gguf").string(), "-o");
  EXPECT_NE(
      bad_input_message([&] { check_output_file(dir_.string(), "-o"); }).find("is a directory"),
      std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              check_output_file((dir_ / "no" / "x.gguf").string(), "-o");
            }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] { check_output_file("/dev/full", "-o"); }).find("is under /dev"),
            std::string::npos);
}

}  // namespace
}  // namespace medtune::io
