// Reading a whole small file (a JSON config, a manifest, a template) that the user or an earlier
// run gave: one place that says, by the file's path, why it cannot be used. A directory or a
// missing file is named as such instead of surfacing as a stream's empty read, which
// nlohmann::json would report as "unexpected end of input".
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace medtune::io {

// The file's bytes. BadInput "PATH: is a directory, expected a file", "PATH: cannot open (why)"
// or "PATH: read error".
std::string read_whole_file(const std::string& path);

// read_whole_file, parsed. BadInput "PATH: not valid JSON: <the parser's line and column>".
nlohmann::json read_json_file(const std::string& path);

}  // namespace medtune::io
