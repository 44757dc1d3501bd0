// Typed errors of the medtune library. apps/ turns them into exit codes:
// BadInput -> 2 (the user's file, field or argument is wrong), Internal -> 1.
#pragma once

#include <stdexcept>
#include <string>

namespace medtune {

// Something the user gave us is wrong: a file, a field, a tensor, an argument.
// The message names it (file, key, tensor, line) so it can be fixed without a debugger.
class BadInput : public std::runtime_error {
 public:
  explicit BadInput(const std::string& what) : std::runtime_error(what) {}
};

// A bug or an environment failure (allocation, I/O error) that the user cannot fix by editing input.
class Internal : public std::runtime_error {
 public:
  explicit Internal(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace medtune
