#include "io/whole_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace medtune::io {

std::string read_whole_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw BadInput(path + ": is a directory, expected a file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw BadInput(path + ": cannot open" +
                   (err != 0 ? " (" + std::string(std::strerror(err)) + ")" : ""));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw BadInput(path + ": read error");
  return text.str();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_whole_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace medtune::io
