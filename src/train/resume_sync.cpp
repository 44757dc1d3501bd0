#include "train/resume_sync.h"

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

// A whole file's bytes; "" when it cannot be read.
std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

// The file names checksums.sha256 lists (sha256sum's "<64 hex>  <name>" lines; rank 0 verified
// them before choosing the checkpoint).
std::vector<std::string> listed_files(const std::string& checksums) {
  std::vector<std::string> names;
  std::istringstream in(checksums);
  for (std::string line; std::getline(in, line);)
    if (line.size() > 66) names.push_back(line.substr(66));
  return names;
}

// This rank holds rank 0's checkpoint at the same path: same checksums file, every file verifying.
bool holds_same_checkpoint(const std::string& path, const std::string& checksums) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  return file_bytes(fs::path(path) / kChecksumsFile) == checksums && checkpoint_problem(path).empty();
}

}  // namespace

void ResumeSource::remove_received_copy() {
  if (temp_dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(temp_dir_, ec);
  temp_dir_.clear();
}

ResumeSource::ResumeSource(ResumeSource&& other) noexcept
    : checkpoint_(std::move(other.checkpoint_)),
      chosen_path_(std::move(other.chosen_path_)),
      temp_dir_(std::move(other.temp_dir_)),
      received_by_(std::move(other.received_by_)) {
  other.temp_dir_.clear();
}

ResumeSource agree_on_resume_point(dist::Communicator& comm, const std::optional<CheckpointEntry>& chosen,
                                   const std::string& own_output_dir) {
  const bool root = comm.rank() == 0;
  ResumeSource out;
  const std::string path = dist::broadcast_string(comm, root && chosen ? chosen->path : "", 0, "the resume point");
  if (path.empty()) return out;  // every rank starts fresh
  const std::string checksums =
      dist::broadcast_string(comm, root ? file_bytes(fs::path(path) / kChecksumsFile) : "", 0, "the checkpoint's checksums");
  const std::string local =
      root || own_output_dir.empty() ? path : (fs::path(own_output_dir) / fs::path(path).filename()).string();
  const bool here = root || holds_same_checkpoint(local, checksums);
  const auto where = comm.allgather(here ? "here" : "missing", "where each rank finds the checkpoint");
  out.chosen_path_ = path;
  const int64_t step = checkpoint_step(fs::path(path).filename().string()).value_or(-1);
  out.checkpoint_ = CheckpointEntry{step, local};
  for (size_t r = 0; r < where.size(); ++r)
    if (where[r] != "here") out.received_by_.push_back(static_cast<int>(r));
  if (out.received_by_.empty()) return out;

  // Some rank does not see it: rank 0 sends every file (a broadcast; the ranks that have it
  // discard the bytes), each missing rank writes them into a fresh private folder.
  std::string temp;
  if (!here) {
    std::string pattern = (fs::temp_directory_path() / "medtune-resume-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw BadInput("cannot create a temporary folder under " + fs::temp_directory_path().string() +
                     " to receive " + path + " from rank 0 (set TMPDIR to a writable folder)");
    out.temp_dir_ = pattern;
    temp = (fs::path(pattern) / fs::path(path).filename()).string();
    fs::create_directory(temp);
  }
  std::vector<std::string> names = listed_files(checksums);
  names.push_back(std::string(kChecksumsFile));
  for (const auto& name : names) {
    const std::string bytes =
        dist::broadcast_string(comm, root ? file_bytes(fs::path(path) / name) : "", 0, path + "/" + name);
    if (here) continue;
    std::ofstream f(fs::path(temp) / name, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw BadInput("cannot write " + (fs::path(temp) / name).string() + " (receiving the checkpoint from rank 0)");
  }
  if (!here) {
    const std::string problem = checkpoint_problem(temp);
    if (!problem.empty()) throw BadInput("the copy of " + path + " received from rank 0 does not verify: " + problem);
    out.checkpoint_ = CheckpointEntry{step, temp};
  }
  return out;
}

}  // namespace medtune::train
