// <regex>, with one GCC 12 warning silenced: with -fsanitize=address it reports
// -Wmaybe-uninitialized inside libstdc++'s <regex> (std::function moved in
// _NFA::_M_insert_subexpr_*), a false positive in the library, silenced for the header only.
// Clang has no such warning (and warns about the unknown name): GCC only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#else
#include <regex>
#endif
