// The message of the BadInput a call throws, for tests that check what a user is told.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace medtune::testing {

// What `f` says in its BadInput; "(no BadInput)" when it returns normally (any other exception
// propagates and fails the test with its own message).
inline std::string bad_input_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const BadInput& e) {
    return e.what();
  }
  return "(no BadInput)";
}

}  // namespace medtune::testing
