// A scratch directory that belongs to the running test process alone.
//
// ctest runs every gtest case as its own process, several at once (and a CI rehearsal may run
// beside a developer's build), so a fixed name under /tmp is shared: CI once failed because
// one test read the m.jsonl another had just rewritten. The directory name carries the suite,
// the test and the pid.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace medtune::testing {

// TempDir()/medtune_<tag>_<Suite>_<Test>_<pid>, created if missing (files a test wrote earlier
// stay, so a helper may call this once per file).
inline std::filesystem::path scratch_dir(const std::string& tag) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "medtune_" + tag;
  if (info != nullptr) name += std::string("_") + info->test_suite_name() + "_" + info->name();
  name += "_" + std::to_string(::getpid());
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace medtune::testing
