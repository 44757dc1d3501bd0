#include "train/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/error.h"
#include "core/sha256.h"
#include "io/atomic_file.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

// Makes a rename inside `dir` durable (see io/atomic_file.cpp for why the order matters).
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Internal(dir.string() + ": cannot open to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP)
    throw Internal(dir.string() + ": fsync failed: " + std::strerror(err));
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Internal(to.string() + ": cannot rename " + from.string() + " to it: " + std::strerror(errno));
}

// The regular files of `dir` (names), sorted; the checksums file itself left out.
std::vector<std::string> files_to_checksum(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name != kChecksumsFile) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// checksums.sha256 as name -> digest; "" and the problem in `problem` when it is malformed.
std::map<std::string, std::string> read_checksums(const fs::path& path, std::string& problem) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  if (!in) {
    problem = path.string() + ": missing (the save did not finish)";
    return out;
  }
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    // sha256sum's text format: 64 hex digits, two spaces, the file name.
    const bool hex = line.size() > 66 && std::all_of(line.begin(), line.begin() + 64, [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    if (!hex || line[64] != ' ' || line[65] != ' ' || line.find('/', 66) != std::string::npos) {
      problem = path.string() + ":" + std::to_string(line_no) + ": not '<sha256>  <file name>'";
      return out;
    }
    out[line.substr(66)] = line.substr(0, 64);
  }
  if (out.empty()) problem = path.string() + ": empty (the save did not finish)";
  return out;
}

}  // namespace

const std::vector<std::string>& checkpoint_files() {
  static const std::vector<std::string> files{"adapter_config.json",  "adapter_model.safetensors",
                                              "optimizer.safetensors", "trainer_state.json",
                                              "config_resolved.json", "identity.json"};
  return files;
}

std::optional<int64_t> checkpoint_step(std::string_view name) {
  constexpr std::string_view prefix = "checkpoint-";
  if (name.substr(0, prefix.size()) != prefix || name.size() == prefix.size() || name.size() > prefix.size() + 18)
    return std::nullopt;
  int64_t step = 0;
  for (const char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

int64_t save_delay_ms_from_env() {
  const char* v = std::getenv("MEDTUNE_TEST_SAVE_DELAY_MS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long ms = std::strtoll(v, &end, 10);
  if (*end != '\0' || ms < 0) throw BadInput("MEDTUNE_TEST_SAVE_DELAY_MS: not a number of milliseconds: " + std::string(v));
  return ms;
}

std::string write_checkpoint_dir(const std::string& output_dir, int64_t step,
                                 const std::vector<CheckpointPart>& parts, int64_t delay_ms) {
  const std::string name = "checkpoint-" + std::to_string(step);
  const fs::path out(output_dir);
  const fs::path tmp = out / (std::string(kTempPrefix) + std::to_string(step));
  const fs::path final_path = out / name;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    throw Internal(tmp.string() + ": cannot create the folder for " + name + ": " + ec.message());
  // Removes the half-written folder on any failure: nothing half-written stays behind.
  struct Cleanup {
    fs::path p;
    bool armed = true;
    ~Cleanup() {
      std::error_code e;
      if (armed) fs::remove_all(p, e);
    }
  } cleanup{tmp};

  auto fail = [&](const std::string& what, const std::exception& e, bool bad_input) {
    const std::string msg = "cannot save " + name + " (" + what + "): " + e.what();
    if (bad_input) throw BadInput(msg);
    throw Internal(msg);
  };
  for (const auto& part : parts) {
    try {
      part.write(tmp.string());
    } catch (const BadInput& e) {
      fail(part.what, e, true);
    } catch (const std::exception& e) {
      fail(part.what, e, false);
    }
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  try {
    std::string sums;
    for (const auto& f : files_to_checksum(tmp)) sums += sha256_file_hex((tmp / f).string()) + "  " + f + "\n";
    io::atomic_write_file((tmp / kChecksumsFile).string(), sums);
    if (fs::exists(final_path)) {
      // Saving a step again (after a resume from a damaged newer checkpoint): swap the complete new
      // folder in, then drop the old one.
      const fs::path old = out / (std::string(kTempPrefix) + std::to_string(step) + ".old");
      fs::remove_all(old);
      rename_or_throw(final_path, old);
      rename_or_throw(tmp, final_path);
      fsync_directory(out);
      fs::remove_all(old);
    } else {
      rename_or_throw(tmp, final_path);
      fsync_directory(out);
    }
  } catch (const std::exception& e) {
    fail("checksums and rename", e, false);
  }
  cleanup.armed = false;
  return final_path.string();
}

std::string checkpoint_problem(const std::string& dir) {
  const fs::path d(dir);
  std::string problem;
  const auto sums = read_checksums(d / kChecksumsFile, problem);
  if (!problem.empty()) return problem;
  for (const auto& f : checkpoint_files())
    if (!sums.count(f)) return (d / f).string() + ": not listed in " + std::string(kChecksumsFile);
  for (const auto& [name, digest] : sums) {
    const fs::path p = d / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return p.string() + ": missing";
    try {
      if (sha256_file_hex(p.string()) != digest) return p.string() + ": checksum mismatch (truncated or corrupted)";
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  return "";
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& output_dir) {
  std::vector<CheckpointEntry> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const auto step = checkpoint_step(e.path().filename().string());
    if (step && e.is_directory()) found.push_back({*step, e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

std::optional<CheckpointEntry> newest_valid_checkpoint(const std::string& output_dir,
                                                       std::vector<std::string>& warnings) {
  const auto all = list_checkpoints(output_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string problem = checkpoint_problem(it->path);
    if (problem.empty()) return *it;
    warnings.push_back("skipping " + it->path + ": " + problem);
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& output_dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(output_dir);
  while (static_cast<int64_t>(all.size()) > keep) {
    fs::remove_all(all.front().path);
    all.erase(all.begin());
  }
}

std::vector<std::string> remove_interrupted_saves(const std::string& output_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0 && e.is_directory()) {
      fs::remove_all(e.path(), ec);
      removed.push_back(name);
    }
  }
  return removed;
}

}  // namespace medtune::train
