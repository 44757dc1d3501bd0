#include "io/output_path.h"

#include <unistd.h>

#include <array>
#include <filesystem>
#include <string_view>

#include "core/error.h"

namespace medtune::io {

namespace fs = std::filesystem;

namespace {

// Kernel file systems: writing there does not store a file (and can change the system).
constexpr std::array<std::string_view, 3> kVirtualRoots = {"/proc", "/sys", "/dev"};

// The absolute, symlink-resolved form of the part of `p` that exists, plus the rest as written.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

void refuse_virtual(const std::string& p, const std::string& what) {
  const std::string r = resolved(p).string();
  for (std::string_view root : kVirtualRoots)
    if (r == root || (r.starts_with(root) && r[root.size()] == '/'))
      throw BadInput(
          what + " " + p + ": is under " + std::string(root) +
          ", a virtual file system that does not store files; choose a directory on disk");
}

// The nearest existing ancestor of `p` (p itself if it exists).
fs::path existing_ancestor(const fs::path& p) {
  fs::path a = p;
  std::error_code ec;
  while (!a.empty() && !fs::exists(a, ec)) {
    if (a == a.parent_path()) break;
    a = a.parent_path();
  }
  return a.empty() ? fs::path(".") : a;
}

}  // namespace

void check_output_dir(const std::string& dir, const std::string& what) {
  if (dir.empty()) throw BadInput(what + ": empty path");
  refuse_virtual(dir, what);
  std::error_code ec;
  const fs::path abs = fs::absolute(dir);
  if (fs::exists(abs, ec) && !fs::is_directory(abs, ec))
    throw BadInput(what + " " + dir + ": exists and is not a directory");
  const fs::path anc = existing_ancestor(abs);
  if (!fs::is_directory(anc, ec))
    throw BadInput(what + " " + dir + ": " + anc.string() + " is not a directory");
  if (::access(anc.c_str(), W_OK | X_OK) != 0)
    throw BadInput(what + " " + dir + ": " + anc.string() + " is not writable");
}

void prepare_output_dir(const std::string& dir, const std::string& what) {
  check_output_dir(dir, what);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw BadInput(what + " " + dir + ": cannot create directory: " + ec.message());
}

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw BadInput(what + ": empty path");
  refuse_virtual(path, what);
  std::error_code ec;
  const fs::path abs = fs::absolute(path);
  if (fs::is_directory(abs, ec))
    throw BadInput(what + " " + path + ": is a directory, expected a file name");
  const fs::path parent = abs.parent_path();
  if (!fs::is_directory(parent, ec))
    throw BadInput(what + " " + path + ": directory " + parent.string() + " does not exist");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw BadInput(what + " " + path + ": directory " + parent.string() + " is not writable");
}

}  // namespace medtune::io
