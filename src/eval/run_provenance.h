// What an evaluation report records about where its numbers came from: the exact bytes of every
// input (SHA-256 of the model, adapter and data files), the program version, the thread count and
// the command line, so a result can be reproduced or questioned later (`medtune verify` re-checks
// digests of this shape).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace medtune::eval {

// The files of a PEFT adapter directory that medtune reads (adapter_config.json and
// adapter_model.safetensors), those that exist; BadInput when `dir` is not a directory.
std::vector<std::string> adapter_files(const std::string& dir);

// [{"path", "bytes", "sha256"}, ...] of `paths` made absolute, in the order given.
nlohmann::json file_digests_json(const std::vector<std::string>& paths);

// This process's command line from /proc/self/cmdline, each argument shell-quoted when it needs
// it, so that it can be pasted back into a shell; "" where /proc is not available.
std::string process_command_line();

// An argument quoted for a POSIX shell when it contains anything but [A-Za-z0-9_./=:,+-@%].
std::string shell_quote(const std::string& arg);

}  // namespace medtune::eval
