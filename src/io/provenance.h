// File digests for provenance: which exact bytes a run or a report came from. A digest records the
// path, the size and the SHA-256, and can be checked again later (`medtune verify`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace medtune::io {

struct FileDigest {
  std::string path;    // as recorded (absolute for inputs, relative to the run for outputs)
  int64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

// The files of a MODEL argument: the .gguf itself, or every regular file directly in a Hugging
// Face directory except hidden ones and *.md (a README edit does not change the model; a file
// medtune does not read today, such as added_tokens.json, may still define it), sorted by name.
// Throws BadInput when `model_path` is neither a file nor a directory.
std::vector<std::string> model_files(const std::string& model_path);

// Hashes `path` (streamed; model files are many GB). Throws BadInput naming an unreadable file.
FileDigest digest_file(const std::string& path);
std::vector<FileDigest> digest_files(const std::vector<std::string>& paths);

nlohmann::json to_json(const FileDigest& d);
std::vector<nlohmann::json> to_json(const std::vector<FileDigest>& ds);
// `where` names the record in messages ("manifest.json: inputs.datasets[0]").
FileDigest file_digest_from_json(const nlohmann::json& j, const std::string& where);

// Compares a recorded digest with the file as it is now, reading it at `actual_path` (the recorded
// path, or the recorded one resolved against a run directory). Empty when they match; otherwise
// what differs ("missing", "size 10 -> 12 bytes", "SHA-256 ab12... -> cd34...").
std::string digest_mismatch(const FileDigest& recorded, const std::string& actual_path);

}  // namespace medtune::io
