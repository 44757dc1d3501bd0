// read_whole_file / read_json_file: every way a small input file can be unusable is reported by
// its path and what is wrong, never as a parser's "unexpected end of input".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/whole_file.h"
#include "support/bad_input.h"
#include "support/scratch_dir.h"

namespace medtune::io {
namespace {

using medtune::testing::bad_input_message;

namespace fs = std::filesystem;

class WholeFile : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  const fs::path dir_ = medtune::testing::scratch_dir("whole_file");
};

TEST_F(WholeFile, ReadsEveryByte) {
  const std::string bytes("a\0b\r\n\xff", 6);  // NUL, CR LF and a non-UTF-8 byte kept as they are
  EXPECT_EQ(read_whole_file(write("bin", bytes)), bytes);
  EXPECT_EQ(read_whole_file(write("empty", "")), "");
}

TEST_F(WholeFile, NamesAMissingFileAndADirectory) {
  const std::string missing = (dir_ / "absent.json").string();
  EXPECT_EQ(bad_input_message([&] { read_whole_file(missing); }),
            missing + ": cannot open (No such file or directory)");
  EXPECT_EQ(bad_input_message([&] { read_json_file(dir_.string()); }),
            dir_.string() + ": is a directory, expected a file");
}

TEST_F(WholeFile, SaysWhyAFileCannotBeOpened) {
  // A path under a regular file: open(2) fails with ENOTDIR, for root too (CI runs as root, which
  // a file's permission bits would not stop).
  const std::string under_file = write("plain", "x") + "/config.json";
  EXPECT_EQ(bad_input_message([&] { read_json_file(under_file); }),
            under_file + ": cannot open (Not a directory)");
}

TEST_F(WholeFile, ParsesJsonAndNamesWhereItIsBroken) {
  EXPECT_EQ(read_json_file(write("ok.json", R"({"a": [1, 2]})"))["a"][1], 2);
  const std::string bad = write("bad.json", "{\"a\": 1,\n \"b\": }");
  const std::string m = bad_input_message([&] { read_json_file(bad); });
  EXPECT_EQ(m.rfind(bad + ": not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("line 2, column"), std::string::npos) << m;
  const std::string empty = write("empty.json", "");
  EXPECT_EQ(
      bad_input_message([&] { read_json_file(empty); }).rfind(empty + ": not valid JSON: ", 0), 0u);
}

}  // namespace
}  // namespace medtune::io
