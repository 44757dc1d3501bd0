#include "eval/run_provenance.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "io/provenance.h"

namespace medtune::eval {

namespace fs = std::filesystem;

std::vector<std::string> adapter_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw BadInput(dir + ": not an adapter directory (cannot record its provenance)");
  std::vector<std::string> out;
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p, ec)) out.push_back(p.string());
  }
  return out;
}

nlohmann::json file_digests_json(const std::vector<std::string>& paths) {
  std::vector<std::string> absolute;
  absolute.reserve(paths.size());
  for (const auto& p : paths) absolute.push_back(fs::absolute(p).lexically_normal().string());
  return io::to_json(io::digest_files(absolute));
}

std::string shell_quote(const std::string& arg) {
  static const std::string kSafe =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,+-@%";
  if (!arg.empty() && arg.find_first_not_of(kSafe) == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string process_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) return "";
  std::ostringstream buf;  // (istreambuf_iterator trips GCC 12's -Wnull-dereference)
  buf << in.rdbuf();
  const std::string raw = buf.str();
  std::string out;
  size_t start = 0;
  while (start < raw.size()) {  // arguments are NUL-terminated
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    out += (out.empty() ? "" : " ") + shell_quote(raw.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace medtune::eval
