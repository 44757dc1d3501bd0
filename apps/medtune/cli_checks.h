// Range checks for numeric options, with messages a user reads: "-n: must be an integer >= 1,
// got '0'" instead of CLI11's "not in range 0.000000 to 1797693134862315708...". Floats must be
// finite: NaN passes every comparison, so a range check alone would let `--temperature nan` in.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace medtune::cli {

// An integer in [lo, hi].
inline CLI::Validator integer_in(long long lo, long long hi = LLONG_MAX) {
  const std::string want =
      hi == LLONG_MAX ? "an integer >= " + std::to_string(lo)
                      : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return "must be " + want + ", got '" + s + "'";
        return "";
      },
      want);
}

// A finite number in [lo, hi].
inline CLI::Validator number_in(double lo, double hi) {
  auto fmt = [](double x) {
    std::string t = std::to_string(x);
    t.erase(t.find_last_not_of('0') + 1);
    if (t.back() == '.') t.pop_back();
    return t;
  };
  const std::string want = std::isinf(hi) ? "a finite number >= " + fmt(lo)
                                          : "a number from " + fmt(lo) + " to " + fmt(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
          return "must be " + want + ", got '" + s + "'";
        return "";
      },
      want);
}

}  // namespace medtune::cli
