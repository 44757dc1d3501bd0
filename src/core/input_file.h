// Opening a file the user named: a directory, a missing path or an unreadable file is reported by
// its path and what it is, instead of a stream's "read error" or an empty-content message.
#pragma once

#include <filesystem>
#include <string>

#include "core/error.h"

namespace medtune {

// Throws BadInput unless `path` names an existing regular file (a symlink to one is fine).
// `what` says what the file was for ("config", "--data"), leading the message.
inline void require_input_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (path.empty()) throw BadInput(what + ": empty path");
  if (!fs::exists(st)) throw BadInput(what + " " + path + ": no such file");
  if (fs::is_directory(st)) throw BadInput(what + " " + path + ": is a directory, expected a file");
  if (!fs::is_regular_file(st)) throw BadInput(what + " " + path + ": not a regular file");
}

}  // namespace medtune
