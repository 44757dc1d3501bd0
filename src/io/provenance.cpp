#include "io/provenance.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/sha256.h"

namespace medtune::io {

namespace fs = std::filesystem;

namespace {

std::string short_hash(const std::string& h) { return h.substr(0, 12) + "..."; }

}  // namespace

std::vector<std::string> model_files(const std::string& model_path) {
  std::error_code ec;
  if (fs::is_regular_file(model_path, ec)) return {model_path};
  if (!fs::is_directory(model_path, ec))
    throw BadInput(model_path + ": not a model file or directory (cannot record its provenance)");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(model_path, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && !name.empty() && name[0] != '.' && e.path().extension() != ".md")
      files.push_back(e.path().string());
  }
  if (ec) throw BadInput(model_path + ": cannot list the directory: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

FileDigest digest_file(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw BadInput(path + ": cannot read for provenance: " + ec.message());
  return {path, static_cast<int64_t>(size), sha256_file_hex(path)};
}

std::vector<FileDigest> digest_files(const std::vector<std::string>& paths) {
  std::vector<FileDigest> out;
  out.reserve(paths.size());
  for (const auto& p : paths) out.push_back(digest_file(p));
  return out;
}

nlohmann::json to_json(const FileDigest& d) {
  return {{"path", d.path}, {"bytes", d.bytes}, {"sha256", d.sha256}};
}

std::vector<nlohmann::json> to_json(const std::vector<FileDigest>& ds) {
  std::vector<nlohmann::json> out;
  for (const auto& d : ds) out.push_back(to_json(d));
  return out;
}

FileDigest file_digest_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("path") || !j["path"].is_string() || !j.contains("bytes") ||
      !j["bytes"].is_number_integer() || !j.contains("sha256") || !j["sha256"].is_string() ||
      j["sha256"].get<std::string>().size() != 64)
    throw BadInput(where + ": expected {\"path\": string, \"bytes\": integer, \"sha256\": 64 hex digits}");
  return {j["path"].get<std::string>(), j["bytes"].get<int64_t>(), j["sha256"].get<std::string>()};
}

std::string digest_mismatch(const FileDigest& recorded, const std::string& actual_path) {
  std::error_code ec;
  if (!fs::is_regular_file(actual_path, ec)) return "missing";
  const auto size = static_cast<int64_t>(fs::file_size(actual_path, ec));
  if (ec) return "unreadable: " + ec.message();
  if (size != recorded.bytes)
    return "size " + std::to_string(recorded.bytes) + " -> " + std::to_string(size) + " bytes";
  const std::string now = sha256_file_hex(actual_path);
  if (now != recorded.sha256) return "SHA-256 " + short_hash(recorded.sha256) + " -> " + short_hash(now);
  return "";
}

}  // namespace medtune::io
