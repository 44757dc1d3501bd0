// Where a command will write, checked before it does any work or writes anything: a file where a
// directory is wanted, a directory where a file is wanted, a virtual file system (/proc, /sys,
// /dev) or an unwritable place is the user's mistake, reported as BadInput naming the path and
// the option it came from, not an internal error after minutes of scoring or training.
#pragma once

#include <string>

namespace medtune::io {

// `dir` (given by option or key `what`, e.g. "--out" or "output_dir") is usable as an output
// directory: it is one already, or it can be created. Checks only; creates nothing.
void check_output_dir(const std::string& dir, const std::string& what);

// check_output_dir, then creates `dir` (and its parents) if missing.
void prepare_output_dir(const std::string& dir, const std::string& what);

// `path` is usable as an output file: not a directory, not on a virtual file system, and its
// parent directory exists and is writable. Checks only.
void check_output_file(const std::string& path, const std::string& what);

}  // namespace medtune::io
