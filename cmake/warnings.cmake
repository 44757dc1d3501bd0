# Warnings are errors for our own targets only (never for dependencies).
# -Wno-restrict: GCC 12 reports false -Wrestrict errors inside libstdc++ for ordinary
# `"literal" + std::string` expressions at -O2 (GCC bug 105329, fixed in GCC 13); the warning
# says nothing about our code, so it is off rather than worked around at every concatenation.
function(medtune_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
    -Woverloaded-virtual -Wnull-dereference -Wdouble-promotion -Wformat=2 -Werror
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()
